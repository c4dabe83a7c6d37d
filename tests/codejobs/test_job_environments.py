"""A project's requirements as a job environment: the requirements rule both sides apply (zico_contracts.jobenv),
and the worker's builder and cache (workers.jobenv) run for real with the pinned installer (uv) against a local
wheelhouse of wheels made here, as on a host with no network (ZICO_JOBENV_WHEELHOUSE): built once, reused, the
least recently used evicted but never one a job holds, a replacement of the worker's own packages refused, a
missing package failing with the installer's words, the limits enforced."""
import io
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from workers import jobenv as builder
from zico_contracts import jobenv

SIX = __import__("importlib.metadata").metadata.version("six")  # a package the worker's environment has


def wheel(house: Path, name: str, version: str, body: str = "") -> Path:
    """A pure-Python wheel ``name-version-py3-none-any.whl`` holding module ``name`` (``VERSION``, ``body``)."""
    house.mkdir(parents=True, exist_ok=True)
    path = house / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n{body}",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{p},,\n" for p in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
    return path


def reqs(*lines: str) -> list[jobenv.Requirement]:
    return jobenv.check_requirements(list(lines), "requirements.txt")


# -- the rule -------------------------------------------------------------------------------------------------------

def test_requirements_are_names_with_versions_and_the_worker_keeps_its_torch():
    got = reqs("# a comment", "", "humanize>=4  # inline", "Einops[torch] == 0.8.0 ; python_version >= '3.9'", "torch")
    assert [r.name for r in got] == ["humanize", "einops", "torch"]
    assert got[1].text == "Einops[torch] == 0.8.0; python_version >= '3.9'"
    for line, words in (("torch==2.4.0", "torch is provided by the device's worker"),
                        ("nvidia-cublas-cu12>=12", "nvidia-cublas-cu12 is provided"),
                        ("-r other.txt", "options are not accepted"),
                        ("--index-url https://evil.example/simple", "options are not accepted"),
                        ("pkg @ https://example.com/pkg.whl", "URLs and paths are not accepted"),
                        ("./vendor/pkg", "URLs and paths are not accepted"),
                        ("humanize>>4", "cannot read the version specifier")):
        with pytest.raises(jobenv.RequirementsError, match="requirements.txt line 1") as exc:
            reqs(line)
        assert words in str(exc.value), (line, str(exc.value))
    with pytest.raises(jobenv.RequirementsError, match="over the limit of 200"):
        reqs(*[f"p{i}" for i in range(201)])


def test_pyproject_dependencies_count_when_there_is_no_requirements_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["humanize>=4", "torch"]\n')
    source, got = jobenv.requirements_in_dir(tmp_path)
    assert source == "pyproject.toml" and [r.text for r in got] == ["humanize>=4", "torch"]
    (tmp_path / "requirements.txt").write_text("inflection\n")
    assert jobenv.requirements_in_dir(tmp_path)[0] == "requirements.txt"
    (tmp_path / "requirements.txt").write_text("# nothing\n")
    assert jobenv.requirements_in_dir(tmp_path) is None  # an empty list asks for no environment
    (tmp_path / "requirements.txt").unlink()
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = "humanize"\n')
    with pytest.raises(jobenv.RequirementsError, match="must be a list of strings"):
        jobenv.requirements_in_dir(tmp_path)


def test_the_rule_reads_an_uploaded_archive_as_the_web_side_does(tmp_path):
    path = tmp_path / "code.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for name, text in (("train.py", "print(1)\n"), ("requirements.txt", "humanize==4.17.0\ntorch==2.1\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    with pytest.raises(jobenv.RequirementsError, match="line 2: 'torch==2.1': torch is provided"):
        jobenv.requirements_in_archive(path, "tar.gz")
    zpath = tmp_path / "code.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("requirements.txt", "humanize==4.17.0\n")
    assert [r.name for r in jobenv.requirements_in_archive(zpath, "zip")[1]] == ["humanize"]


def test_the_environment_key_is_the_set_of_requirements_on_one_base():
    a = jobenv.environment_key(reqs("b>=1", "a"), "python 3.11 torch 2")
    assert a == jobenv.environment_key(reqs("a", "b>=1"), "python 3.11 torch 2")  # order does not matter
    assert a != jobenv.environment_key(reqs("a", "b>=2"), "python 3.11 torch 2")
    assert a != jobenv.environment_key(reqs("a", "b>=1"), "python 3.11 torch 3")  # another worker's torch


# -- the builder, for real ------------------------------------------------------------------------------------------

@pytest.fixture
def house(tmp_path):
    h = tmp_path / "wheelhouse"
    wheel(h, "zicoenvtesta", "1.0")
    wheel(h, "zicoenvtestb", "2.0")
    wheel(h, "six", "1.0.0")  # another version of a package the worker has
    return h


def cache(tmp_path, house, **knobs):
    return builder.EnvCache(builder.Settings(tmp_path / "envs", wheelhouse=str(house), **knobs))


def test_an_environment_is_built_once_then_reused_and_holds_only_what_the_worker_lacks(tmp_path, house):
    c = cache(tmp_path, house)
    lines: list[str] = []
    first = c.acquire(reqs("zicoenvtesta==1.0", f"six=={SIX}", "torch"), lines.append)
    assert not first.cached and first.build_s > 0
    assert first.packages == ["zicoenvtesta==1.0"]  # six and torch: the worker's own, not installed again
    assert (first.site / "zicoenvtesta" / "__init__.py").read_text().startswith("VERSION = '1.0'")
    assert not (first.site / "six.py").exists() and not (first.site / "torch").exists()
    assert any("+ zicoenvtesta==1.0" in line for line in lines), lines  # the installer's own lines, streamed
    t0 = time.monotonic()
    again = c.acquire(reqs("torch", f"six=={SIX}", "zicoenvtesta==1.0"), lines.append)  # the same set
    assert again.cached and again.build_s == 0.0 and again.key == first.key and time.monotonic() - t0 < 1.0
    assert again.describe() == {"state": "ready", "key": first.key, "packages": ["zicoenvtesta==1.0"],
                                "build_s": 0.0, "cached": True}
    first.release()
    again.release()


def test_the_least_recently_used_environment_goes_first_but_never_one_a_job_holds(tmp_path, house):
    c = cache(tmp_path, house, max_envs=1)
    held = c.acquire(reqs("zicoenvtesta"), lambda line: None)
    other = c.acquire(reqs("zicoenvtestb"), lambda line: None)  # over the bound, but the first is held
    assert held.site.exists() and other.site.exists()
    held.release()
    other.release()
    third = c.acquire(reqs("zicoenvtesta", "zicoenvtestb"), lambda line: None)
    assert not held.site.exists() and not other.site.exists() and third.site.exists()
    third.release()


def test_a_requirement_that_would_replace_the_workers_package_or_cannot_be_found_fails_naming_it(tmp_path, house):
    c = cache(tmp_path, house)
    with pytest.raises(builder.BuildError) as exc:
        c.acquire(reqs("six==1.0.0"), lambda line: None)
    assert f"would replace the worker's six=={SIX} with six==1.0.0" in str(exc.value)
    with pytest.raises(builder.BuildError) as exc:
        c.acquire(reqs("zicoenvtest-missing"), lambda line: None)
    assert "zicoenvtest-missing" in str(exc.value) and "uv exit" in str(exc.value)
    assert [p.name for p in (tmp_path / "envs").iterdir() if p.is_dir() and not p.name.startswith(".")] == []


def test_the_build_stops_at_its_disk_limit(tmp_path, house):
    wheel(house, "zicoenvtestbig", "1.0", body=f"DATA = {'x' * (3 << 20)!r}\n")
    c = cache(tmp_path, house, max_bytes=1 << 20)
    with pytest.raises(builder.BuildError, match=r"disk limit of 1048576 bytes \(ZICO_JOBENV_MAX_BYTES\)"):
        c.acquire(reqs("zicoenvtestbig"), lambda line: None)


def test_a_project_without_requirements_needs_no_environment(tmp_path, house):
    assert builder.for_project(tmp_path, lambda line: None, cache(tmp_path, house)) is None
    (tmp_path / "requirements.txt").write_text("torch==1.0\n")
    with pytest.raises(builder.BuildError, match="torch is provided"):
        builder.for_project(tmp_path, lambda line: None, cache(tmp_path, house))


def test_a_bad_knob_fails_the_job_naming_it(tmp_path, monkeypatch):
    (tmp_path / "requirements.txt").write_text("zicoenvtesta\n")
    monkeypatch.setenv("ZICO_JOBENV_MAX_ENVS", "many")
    with pytest.raises(builder.BuildError, match=r"ZICO_JOBENV_MAX_ENVS='many': expected a positive number"):
        builder.for_project(tmp_path, lambda line: None)
