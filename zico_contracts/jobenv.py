"""A job's own environment: the requirements rule both sides apply (the web side at submission, the worker before
it builds), and the environment's identity. Standard library only.

A project asks for packages with a ``requirements.txt`` at its root (one requirement a line, ``#`` comments) or,
when it has none, a ``pyproject.toml`` whose ``[project] dependencies`` list them. The worker builds those
packages once per distinct set (:func:`environment_key`) into a directory layered on its own environment
(``workers.jobenv``); the job imports them from there.

Rules (:func:`check_requirements`, raises :class:`RequirementsError` naming the file, the line and why):

* a requirement is a package name with optional extras, version specifiers and an environment marker
  (``humanize>=4``, ``einops[torch]==0.8; python_version>='3.9'``); no options (``-r``, ``-e``,
  ``--index-url``...: the worker chooses where packages come from), no URLs or paths;
* a package the worker provides (:data:`PROVIDED`: torch and its CUDA libraries, the allocator binding) may be
  named only without a version (it is then already satisfied): a job never brings another torch;
* at most :data:`MAX_REQUIREMENTS` requirements of :data:`MAX_LINE_CHARS` characters, a file of at most
  :data:`MAX_FILE_BYTES` bytes.
"""
from __future__ import annotations

import hashlib
import json
import re
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

REQUIREMENTS_FILE = "requirements.txt"
PYPROJECT_FILE = "pyproject.toml"
MAX_REQUIREMENTS = 200
MAX_LINE_CHARS = 1000
MAX_FILE_BYTES = 256 * 1024
KEY_VERSION = 1  # bump when the way an environment is built changes, so that old builds are not reused

# Packages the worker's own environment provides; a job's requirements may not replace them.
PROVIDED = ("torch", "torchvision", "torchaudio", "triton", "zico", "zico-allocator")
PROVIDED_PREFIXES = ("nvidia-",)  # CUDA's libraries as wheels (nvidia-cublas-cu12, ...)

_NAME = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[A-Za-z0-9._,\s-]*\])?\s*(.*)\Z", re.S)
_SPEC = re.compile(r"\s*(?:(?:===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*\Z")


class RequirementsError(ValueError):
    """A project's requirements the platform will not build; the message names the file, line and problem."""


@dataclass(frozen=True)
class Requirement:
    """One requirement: ``name`` normalised (PEP 503: lower case, runs of ``-_.`` as ``-``), ``text`` as
    written (whitespace collapsed)."""

    name: str
    text: str


def normalise(name: str) -> str:
    """``Typing_Extensions`` -> ``typing-extensions`` (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_provided(name: str) -> bool:
    """True for a package the worker's environment provides (:data:`PROVIDED`, :data:`PROVIDED_PREFIXES`)."""
    n = normalise(name)
    return n in PROVIDED or n.startswith(PROVIDED_PREFIXES)


def parse_line(line: str, where: str) -> Requirement | None:
    """One line of a requirements file as a Requirement (None: blank or a comment). ``where`` names the file and
    line in errors (``"requirements.txt line 3"``). Raises RequirementsError."""
    text = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
    if not text:
        return None
    if len(text) > MAX_LINE_CHARS:
        raise RequirementsError(f"{where}: longer than {MAX_LINE_CHARS} characters")
    if text.startswith("-"):
        raise RequirementsError(f"{where}: {text.split()[0]!r}: options are not accepted in a job's requirements "
                                "(the worker decides where packages come from); list package names only")
    requirement, _, marker = text.partition(";")
    m = _NAME.match(requirement.strip())
    if m is None or "@" in requirement or "/" in requirement or "://" in text:
        raise RequirementsError(f"{where}: {text!r} is not a package requirement (expected a name with optional "
                                "extras and versions, e.g. 'humanize>=4'; URLs and paths are not accepted)")
    name, _extras, versions = m.groups()
    if not _SPEC.match(versions):
        raise RequirementsError(f"{where}: {text!r}: cannot read the version specifier {versions.strip()!r}")
    if is_provided(name) and versions.strip():
        raise RequirementsError(f"{where}: {text!r}: {normalise(name)} is provided by the device's worker "
                                "(its own build, with the platform's allocator) and a job cannot bring another "
                                f"version; name it without a version, or remove the line")
    return Requirement(normalise(name), " ".join(text.split()) if not marker else
                       f"{' '.join(requirement.split())}; {' '.join(marker.split())}")


def check_requirements(lines: list[str], source: str) -> list[Requirement]:
    """The requirements of ``lines`` (read from ``source``, a file name for messages), checked. Raises
    RequirementsError."""
    out = [r for i, line in enumerate(lines, 1) if (r := parse_line(line, f"{source} line {i}")) is not None]
    if len(out) > MAX_REQUIREMENTS:
        raise RequirementsError(f"{source}: {len(out)} requirements, over the limit of {MAX_REQUIREMENTS}")
    return out


def requirements_from_files(files: dict[str, bytes]) -> tuple[str, list[Requirement]] | None:
    """``(source, requirements)`` from a project's root files (``{"requirements.txt": bytes, ...}``, either may be
    missing); None when it asks for none. ``requirements.txt`` wins over ``pyproject.toml``. Raises
    RequirementsError (unreadable file, too large, a rule broken)."""
    for name in (REQUIREMENTS_FILE, PYPROJECT_FILE):
        data = files.get(name)
        if data is None:
            continue
        if len(data) > MAX_FILE_BYTES:
            raise RequirementsError(f"{name}: {len(data)} bytes, over the limit of {MAX_FILE_BYTES}")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise RequirementsError(f"{name}: not UTF-8 text") from None
        if name == REQUIREMENTS_FILE:
            reqs = check_requirements(text.splitlines(), name)
        else:
            try:
                deps = tomllib.loads(text).get("project", {}).get("dependencies", [])
            except tomllib.TOMLDecodeError as exc:
                raise RequirementsError(f"{name}: not valid TOML: {exc}") from None
            if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
                raise RequirementsError(f"{name}: [project] dependencies must be a list of strings")
            reqs = [r for i, d in enumerate(deps) if (r := parse_line(d, f"{name} dependencies[{i}]"))]
            if len(reqs) > MAX_REQUIREMENTS:
                raise RequirementsError(f"{name}: {len(reqs)} dependencies, over the limit of {MAX_REQUIREMENTS}")
        return (name, reqs) if reqs else None
    return None


def requirements_in_dir(code_dir: str | Path) -> tuple[str, list[Requirement]] | None:
    """:func:`requirements_from_files` for an unpacked project (regular files at its root only, no links)."""
    files = {}
    for name in (REQUIREMENTS_FILE, PYPROJECT_FILE):
        p = Path(code_dir) / name
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as f:
                files[name] = f.read(MAX_FILE_BYTES + 1)
    return requirements_from_files(files)


def requirements_in_archive(path: str | Path, fmt: str) -> tuple[str, list[Requirement]] | None:
    """:func:`requirements_from_files` for a code archive (``fmt`` ``tar.gz`` or ``zip``, already checked by
    ``zico_contracts.codearchive``): its root ``requirements.txt`` / ``pyproject.toml`` members."""
    files: dict[str, bytes] = {}
    wanted = {REQUIREMENTS_FILE, PYPROJECT_FILE, "./" + REQUIREMENTS_FILE, "./" + PYPROJECT_FILE}
    if fmt == "zip":
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.filename in wanted and not info.is_dir():
                    with z.open(info) as f:
                        files[info.filename.removeprefix("./")] = f.read(MAX_FILE_BYTES + 1)
    else:
        with tarfile.open(path, "r:gz") as t:
            for member in t:
                if member.name in wanted and member.isreg():
                    f = t.extractfile(member)
                    files[member.name.removeprefix("./")] = f.read(MAX_FILE_BYTES + 1) if f else b""
    return requirements_from_files(files)


def environment_key(requirements: list[Requirement], base: str) -> str:
    """The environment's identity: sha256 (hex) of the sorted requirements and ``base``, the worker environment
    it is layered on (its Python and torch versions: ``workers.jobenv.base_identity``). The same requirements
    on the same base are the same environment."""
    body = json.dumps({"v": KEY_VERSION, "base": base, "requirements": sorted(r.text for r in requirements)},
                      sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def requirements_text(requirements: list[Requirement]) -> str:
    """The requirements as an installer's requirements file (one a line)."""
    return "".join(r.text + "\n" for r in requirements)
