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
    with pytest.raises(CommandError, match="--points: must be >= 1, got 0"):
        run("import", "/nonexistent.pickle", "--points", "0")


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
