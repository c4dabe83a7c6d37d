"""Packing a project directory as the tar.gz that ``zico submit`` uploads.

Note [What is packed]
    Every regular file and symbolic link under the directory, except ``.git/`` and what the directory's
    ignore files exclude: each ``.gitignore`` and ``.zicoignore`` (git's syntax, read with ``pathspec``'s
    ``GitIgnoreSpec``) applies to its own directory and below, a deeper file wins over a shallower one, and in
    one directory ``.zicoignore`` wins over ``.gitignore`` (so ``!data/small.csv`` there packs a file git
    ignores). As in git, a file inside an excluded directory cannot be included again. Members are stored
    with their relative paths, owner 0 and the file's mode without setuid/setgid bits; the server checks the
    result against its limits (Note [Code archive limits] in zico_contracts/codearchive.py).
"""
from __future__ import annotations

import gzip
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pathspec

from .errors import CliError

IGNORE_FILES = (".zicoignore", ".gitignore")  # in this order of precedence within one directory
ALWAYS_SKIPPED = {".git"}


@dataclass
class Packed:
    files: int
    unpacked_bytes: int


def _spec(directory: Path, name: str) -> pathspec.GitIgnoreSpec | None:
    p = directory / name
    if not p.is_file():
        return None
    try:
        return pathspec.GitIgnoreSpec.from_lines(p.read_text(errors="replace").splitlines())
    except Exception as exc:  # noqa: BLE001 (pathspec raises several kinds for a bad pattern)
        raise CliError(f"{p}: {exc}") from None


def project_files(root: Path) -> list[str]:
    """Relative POSIX paths of what is packed (Note [What is packed]), sorted."""
    root = root.resolve()
    out: list[str] = []

    def ignored(rel: str, is_dir: bool, specs) -> bool:
        for base, spec in reversed(specs):
            sub = rel[len(base) + 1:] if base else rel
            result = spec.check_file(sub + "/" if is_dir else sub)
            if result.include is not None:
                return result.include
        return False

    specs_of: dict[str, list] = {}  # relative dir -> [(dir of the ignore file, spec)], shallowest first
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        specs = list(specs_of.get(rel_dir.rpartition("/")[0], [])) if rel_dir else []
        for name in reversed(IGNORE_FILES):  # .gitignore first, so .zicoignore is checked before it
            if (s := _spec(here, name)) is not None:
                specs.append((rel_dir, s))
        specs_of[rel_dir] = specs
        keep = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if d in ALWAYS_SKIPPED or ignored(rel, True, specs):
                continue
            if (here / d).is_symlink():
                out.append(rel)  # a link to a directory is packed as a link, not followed
                continue
            keep.append(d)
        dirnames[:] = keep
        for f in sorted(filenames):
            rel = f"{rel_dir}/{f}" if rel_dir else f
            p = here / f
            if not (p.is_symlink() or p.is_file()) or ignored(rel, False, specs):
                continue
            out.append(rel)
    return sorted(out)


def pack(root: Path, dest: Path) -> Packed:
    """Write ``root``'s project files (:func:`project_files`) to ``dest`` as tar.gz. CliError when ``root`` is
    not a directory or holds nothing to pack."""
    if not root.is_dir():
        raise CliError(f"{root} is not a directory")
    names = project_files(root)
    if not names:
        raise CliError(f"{root} holds no file to pack (after .gitignore and .zicoignore)")

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode &= 0o777
        info.mtime = 0  # Note [Same files, same archive]
        return info

    files = size = 0
    # Note [Same files, same archive]: the archive is a function of the files' paths, modes and bytes only
    # (no gzip timestamp, no file times, no owners), so packing an unchanged project again gives the same
    # sha256: the web side stores it once, and a rerun of the same command is an identical job that reuses
    # the stored memory curve instead of being profiled again.
    with open(dest, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in names:
            p = root / rel
            tar.add(p, arcname=rel, recursive=False, filter=clean)
            if p.is_file() and not p.is_symlink():
                files += 1
                size += p.stat().st_size
    return Packed(files, size)
