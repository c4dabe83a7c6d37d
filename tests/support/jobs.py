"""Archives for every lane's tests of jobs with code: tar.gz and zip bytes built member by member, hostile
members included (``..`` paths, links out, devices, FIFOs), as ``tests.support.tenants`` builds personas.

A member is a tuple: ``("file", name, data)``, ``("dir", name)``, ``("symlink", name, target)``,
``("hardlink", name, target)``, ``("fifo", name)`` or ``("chardev", name)``.
"""
from __future__ import annotations

import gzip
import io
import stat
import tarfile
import zipfile

TRAIN_PY = b'import sys\nprint("hello from the project", sys.argv[1:])\n'


def tar_gz(members: list[tuple]) -> bytes:
    """A gzip-compressed tar holding ``members`` in order (names written as given, unchecked); the same
    members give the same bytes (times are 0)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, *rest in members:
            info = tarfile.TarInfo(name)
            info.mode = 0o644
            data = None
            if kind == "file":
                data = rest[0]
                info.size = len(data)
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, rest[0]
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, rest[0]
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            else:
                raise ValueError(f"unknown member kind {kind!r}")
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def zip_bytes(members: list[tuple], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip holding ``members`` (kinds file, dir, symlink, fifo, chardev; unix modes in ``external_attr``)."""
    buf = io.BytesIO()
    modes = {"file": stat.S_IFREG | 0o644, "dir": stat.S_IFDIR | 0o755, "symlink": stat.S_IFLNK | 0o777,
             "fifo": stat.S_IFIFO | 0o644, "chardev": stat.S_IFCHR | 0o644}
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for kind, name, *rest in members:
            info = zipfile.ZipInfo(name + ("/" if kind == "dir" and not name.endswith("/") else ""))
            info.external_attr = modes[kind] << 16
            info.compress_type = compression
            data = rest[0] if kind == "file" else rest[0].encode() if kind == "symlink" else b""
            zf.writestr(info, data)
    return buf.getvalue()


def project(extra: list[tuple] | None = None) -> bytes:
    """A small valid project as tar.gz: ``train.py``, ``pkg/__init__.py``, plus ``extra`` members."""
    return tar_gz([("file", "train.py", TRAIN_PY), ("dir", "pkg"), ("file", "pkg/__init__.py", b""),
                   *(extra or [])])
