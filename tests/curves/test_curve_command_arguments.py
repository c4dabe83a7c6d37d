"""``manage.py curve`` argument and file errors: each is a CommandError naming the argument or file, raised
before any work; ``--json -`` leaves stdout to the JSON alone. Also load_curve on hostile files."""
import json
import pickle
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from placement.curves import CurveError, load_curve

CURVE = {"version": 1, "source": "estimate", "device": "cpu", "iteration_s": 0.5, "persistent_bytes": 100,
         "peak_bytes": 300, "points": [[0.0, 100], [0.5, 300], [1.0, 100]]}


def run(*args):
    out, err = StringIO(), StringIO()
    call_command("curve", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def curve_file(tmp_path):
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(CURVE))
    return path


@pytest.mark.parametrize("where", ["missing-dir", "a-directory"])
def test_an_unwritable_json_path_is_a_command_error_naming_it(curve_file, tmp_path, where):
    target = tmp_path / "nonexistent" / "x.json" if where == "missing-dir" else tmp_path
    with pytest.raises(CommandError, match=f"--json {target}"):
        run("show", str(curve_file), "--json", str(target))


def test_json_to_stdout_is_the_json_alone_and_the_summary_goes_to_stderr(curve_file):
    out, err = run("show", str(curve_file), "--json", "-")
    assert json.loads(out)["peak_bytes"] == 300
    assert "peak        " in err and "300 bytes" in err


def test_bad_points_are_refused_before_the_snapshot_is_read():
    # The snapshot does not exist: the error must be about --points, so nothing was read first.
    with pytest.raises(CommandError, match=r"--points: must lie in 1\.\.100000, got 0"):
        run("import", "/nonexistent.pickle", "--points", "0")
    with pytest.raises(CommandError, match=r"--points: must lie in 1\.\.100000, got 100000000"):
        run("import", "/nonexistent.pickle", "--points", "100000000")


@pytest.mark.parametrize("args, message", [
    (["--warmup", "-1"], "--warmup: must lie in 0..100, got -1"),
    (["--warmup", "101"], "--warmup: must lie in 0..100, got 101"),
    (["--steady", "0"], "--steady: must lie in 1..100, got 0"),
    (["--steady", "-3"], "--steady: must lie in 1..100, got -3"),
    (["--steady", "1000000"], "--steady: must lie in 1..100, got 1000000"),
])
@pytest.mark.parametrize("action", ["estimate", "profile"])
def test_iteration_counts_are_checked_before_any_run(action, args, message):
    with pytest.raises(CommandError, match=message):
        run(action, "digits-cnn", *args)


def test_an_option_is_never_taken_for_a_longer_one():
    # argparse would read --device as --device-index on import (allow_abbrev); refused instead
    with pytest.raises(CommandError, match="unrecognized arguments: --device"):
        run("import", "/nonexistent.pickle", "--device", "cuda:1")


def test_points_resamples_what_the_summary_reports(curve_file):
    out, _ = run("show", str(curve_file), "--points", "7")
    assert "points      7" in out


def test_profiling_where_the_allocator_cannot_run_is_a_command_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    with pytest.raises(CommandError, match="profile on cuda:0: "):
        run("profile", "digits-cnn", "--device", "cuda:0")


@pytest.mark.parametrize("change, message", [
    ({"meta": ["a", "list"]}, "meta: expected a JSON object, got list"),
    ({"peak_bytes": "big"}, "peak_bytes: expected a number, got str"),
    ({"peak_bytes": True}, "peak_bytes: expected a number, got bool"),
    ({"device": "tpu"}, "device: expected 'cpu' or 'cuda:N', got 'tpu'"),
    ({"device": 0}, "device: expected 'cpu' or 'cuda:N', got 0"),
])
def test_show_refuses_a_curve_with_a_malformed_field(tmp_path, change, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**CURVE, **change}))
    with pytest.raises(CommandError, match=message):
        run("show", str(path))


def test_a_negative_device_index_is_refused():
    with pytest.raises(CommandError, match="--device-index: must be >= 0, got -1"):
        run("import", "/nonexistent.pickle", "--device-index", "-1")


def test_a_missing_device_index_names_the_devices_the_snapshot_has(tmp_path):
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[], []]}))
    with pytest.raises(CommandError, match=r"no device 7 in the snapshot \(devices: 0\.\.1\)"):
        run("import", str(path), "--device-index", "7")


def test_show_on_a_binary_file_names_it_and_says_it_is_not_a_json_curve(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(CommandError, match=f"curve file {path}: not a JSON curve"):
        run("show", str(path))


def test_load_curve_turns_a_recursion_error_into_a_curve_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"points": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(CurveError, match=f"curve file {path}: not a JSON curve .*nesting too deep"):
        load_curve(path)
    with pytest.raises(CommandError, match="nesting too deep"):
        run("show", str(path))
