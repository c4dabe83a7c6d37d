"""The contracts of jobs with code, as the device worker uses them: safe extraction (zico_contracts.codearchive),
the run-spec code fields (codejob) and the log stream (joblog); all standard library only."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.support.jobs import TRAIN_PY, project, tar_gz, zip_bytes
from zico_contracts import joblog
from zico_contracts.codearchive import ArchiveError, ArchiveLimits, check_member_path, extract_archive
from zico_contracts.codejob import CodeSpec, CodeSpecError, validate_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_contracts_import_neither_django_celery_nor_torch():
    code = ("import sys, zico_contracts.codearchive, zico_contracts.codejob, zico_contracts.joblog; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'torch', 'redis')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def write(tmp_path, data: bytes, name="a.bin") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_a_project_extracts_with_safe_modes(tmp_path):
    archive = write(tmp_path, tar_gz([("file", "./train.py", TRAIN_PY), ("dir", "pkg"), ("file", "pkg/a.py", b"a"),
                                      ("symlink", "pkg/b.py", "a.py"), ("hardlink", "copy.py", "train.py")]))
    info = extract_archive(archive, tmp_path / "out")
    out = tmp_path / "out"
    assert (info.files, info.members) == (3, 5)
    assert (out / "train.py").read_bytes() == TRAIN_PY == (out / "copy.py").read_bytes()
    assert os.readlink(out / "pkg" / "b.py") == "a.py" and (out / "pkg" / "b.py").read_bytes() == b"a"
    assert stat.S_IMODE((out / "train.py").stat().st_mode) == 0o644


def test_a_zip_extracts_too(tmp_path):
    archive = write(tmp_path, zip_bytes([("file", "run.sh", b"echo hi"), ("dir", "d"), ("file", "d/x", b"x")]))
    extract_archive(archive, tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == ["d", "run.sh"]


@pytest.mark.parametrize("members", [
    [("file", "ok.py", b"fine"), ("file", "../escape.py", b"x")],
    [("file", "ok.py", b"fine"), ("symlink", "l", "../../tmp")],
    [("file", "ok.py", b"fine"), ("symlink", "d", "."), ("file", "d/x", b"x")],
    [("file", "ok.py", b"fine"), ("fifo", "p")],
])
def test_a_refused_member_leaves_nothing_extracted_and_nothing_outside(tmp_path, members):
    archive = write(tmp_path, tar_gz(members))
    with pytest.raises(ArchiveError):
        extract_archive(archive, tmp_path / "out")
    assert os.listdir(tmp_path / "out") == [] and not (tmp_path / "escape.py").exists()


def test_extraction_wants_an_empty_directory_and_the_limits_apply(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old").write_text("x")
    with pytest.raises(ArchiveError, match="not empty"):
        extract_archive(write(tmp_path, project()), tmp_path / "out")
    with pytest.raises(ArchiveError, match="more than 2 members"):
        extract_archive(write(tmp_path, project()), tmp_path / "fresh", ArchiveLimits(max_files=2))
    assert os.listdir(tmp_path / "fresh") == []


@pytest.mark.parametrize("name,problem", [("a/../b", "'..'"), ("/a", "absolute"), ("C:/x", "drive letter"),
                                          ("a//b", "empty"), ("a\nb", "control"), ("x" * 300, "255 bytes")])
def test_member_paths_are_strict(name, problem):
    with pytest.raises(ArchiveError, match=problem):
        check_member_path(name)


def test_leading_dot_slash_is_dropped():
    assert check_member_path("./src/train.py") == "src/train.py" and check_member_path("./") == ""


def test_the_run_spec_code_fields_round_trip_and_name_a_bad_field():
    spec = CodeSpec("http://web/api/worker/jobs/1/code", "a" * 64, "tar.gz", 10, ["python", "t.py"], "tok",
                    "http://web/api/worker/jobs/1/files/", {"SEED": "1"}, ArchiveLimits().to_dict(),
                    {"max_files": 1}).to_spec()
    assert CodeSpec.from_spec(spec).to_spec() == spec
    assert ArchiveLimits.from_dict(spec["code_limits"]) == ArchiveLimits()
    with pytest.raises(CodeSpecError, match="code_sha256"):
        CodeSpec.from_spec({**spec, "code_sha256": "xyz"})
    with pytest.raises(CodeSpecError, match=r"env\.LD_PRELOAD"):
        CodeSpec.from_spec({**spec, "env": {"LD_PRELOAD": "x"}})
    assert validate_env({"OMP_NUM_THREADS": "4", "HF_HOME": "/data"}) == {"OMP_NUM_THREADS": "4", "HF_HOME": "/data"}


@pytest.mark.services
def test_the_log_stream_is_capped_and_lines_are_cut():
    from django.conf import settings

    r = redis.Redis.from_url(settings.REDIS_URL)
    key = joblog.log_stream_key(987654321)
    r.delete(key)
    try:
        ids = joblog.append(r, 987654321, [joblog.entry("x" * (joblog.LINE_MAX_BYTES + 10)), joblog.entry("é\n")])
        got = [joblog.parse(i, f) for i, f in r.xrange(key)]
        assert [g["id"] for g in got] == ids
        assert got[0]["cut"] and len(got[0]["line"]) == joblog.LINE_MAX_BYTES and got[1]["line"] == "é"
        assert 0 < r.ttl(key) <= joblog.STREAM_TTL_S
    finally:
        r.delete(key)
    with pytest.raises(ValueError):
        joblog.log_stream_key(0)
