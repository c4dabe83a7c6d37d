"""``manage.py curve`` tests: the real snapshots' summaries, JSON output, estimates and errors."""
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from placement.curves import load_curve
from zico_workloads.curves.snapshot import snapshot_curve


def run(*args):
    out, err = StringIO(), StringIO()
    call_command("curve", *args, stdout=out, stderr=err)
    return out.getvalue()


def test_import_prints_peak_persistent_and_duration_and_writes_json(real_snapshot, tmp_path):
    path = real_snapshot
    target = tmp_path / "curve.json"
    text = run("import", str(path), "--json", str(target), "--points", "256")
    curve = snapshot_curve(path)
    assert f"{int(curve.peak_bytes):,} bytes" in text
    assert f"{int(curve.persistent_bytes):,} bytes" in text
    assert f"duration    {curve.iteration_s:.6f} s" in text
    written = load_curve(target)
    assert len(written.fractions) == 256 and written.peak_bytes == curve.peak_bytes  # bin maxima keep the peak
    assert f"{int(curve.peak_bytes):,} bytes" in run("show", str(target))


def test_estimate_prints_the_json_to_stdout_and_the_summary_to_stderr(settings, tmp_path):
    settings.ZICO_DATA_DIR = tmp_path
    out, err = StringIO(), StringIO()
    call_command("curve", "estimate", "digits-cnn", "-p", "batch_size=8", "--json", "-", stdout=out, stderr=err)
    assert "source      estimate (cpu)" in err.getvalue() and "phases" in err.getvalue()  # summary: stderr
    body = json.loads(out.getvalue())  # stdout: the JSON alone
    assert body["source"] == "estimate" and body["meta"]["params"]["batch_size"] == 8
    assert body["meta"]["cost_model"].endswith("+measured-ops")  # a CPU target's default clock


def test_estimate_takes_the_roofline_clock_on_request(settings, tmp_path):
    settings.ZICO_DATA_DIR = tmp_path
    out = StringIO()
    call_command("curve", "estimate", "digits-cnn", "-p", "batch_size=8", "--timing", "roofline", "--json", "-",
                 stdout=out, stderr=StringIO())
    assert not json.loads(out.getvalue())["meta"]["cost_model"].endswith("+measured-ops")


def test_a_cuda_estimate_is_answered_from_the_cache_the_second_time_unless_no_cache(settings, tmp_path):
    settings.ZICO_DATA_DIR, settings.ZICO_ESTIMATE_CACHE_DIR = tmp_path / "data", tmp_path / "var" / "cache" / "estimates"
    args = ("estimate", "digits-cnn", "-p", "batch_size=8", "--device", "cuda:0")
    first, second, fresh = run(*args), run(*args), run(*args, "--no-cache")
    assert "cache" not in first and "cache       hit " + str(tmp_path / "var" / "cache" / "estimates") in second
    assert "cache" not in fresh
    assert [line for line in first.splitlines() if line.startswith(("peak", "persistent", "iteration "))] == \
        [line for line in second.splitlines() if line.startswith(("peak", "persistent", "iteration "))]
    assert len(list((tmp_path / "var" / "cache" / "estimates").glob("*.json"))) == 1


def test_profile_runs_the_worker_side_in_a_child_process_and_summarises_its_curve(settings, tmp_path):
    # manage.py never imports workers: the run is ``python -m workers.curves profile``, its curve read back
    settings.ZICO_DATA_DIR = tmp_path
    out, err = StringIO(), StringIO()
    call_command("curve", "profile", "digits-cnn", "-p", "batch_size=8", "--steady", "2", "--json", "-",
                 stdout=out, stderr=err)
    assert "source      allocator-trace (cpu)" in err.getvalue()
    body = json.loads(out.getvalue())
    assert body["source"] == "allocator-trace" and body["peak_bytes"] > body["persistent_bytes"] > 0


def test_list_shows_every_workload():
    text = run("list")
    for key in ("digits-cnn", "resnet18", "resnet50", "bert-base", "gpt2-small"):
        assert key in text


@pytest.mark.parametrize("args, message", [
    (("estimate", "vgg99"), "unknown workload 'vgg99'"),
    (("estimate", "digits-cnn", "-p", "batch_size=0"), "batch_size"),
    (("estimate", "digits-cnn", "-p", "nonsense"), "expected key=value"),
    (("estimate", "digits-cnn", "--params-json", "[1]"), "expected a JSON object"),
    (("import", "/nonexistent.pickle"), "cannot read snapshot"),
    (("show", "/nonexistent.json"), "curve file"),
])
def test_bad_input_is_a_command_error_naming_the_problem(args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
