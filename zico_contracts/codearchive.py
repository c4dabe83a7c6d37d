"""Code archives (a user's project directory as tar.gz or zip): the checks both ends run, and safe extraction.

The web side runs :func:`inspect_archive` on every upload (``POST /api/code/``) and stores nothing that fails;
the device worker runs :func:`extract_archive` on the archive it downloads, which applies the very same checks
again member by member while it writes. Standard library only (``tarfile``, ``zipfile``), so the worker imports
it without Django.

Note [Code archive limits]
    Job code is untrusted. An archive is refused, with an :class:`ArchiveError` naming the member and the
    problem, when it breaks any of these rules (the limits are :class:`ArchiveLimits`; the web side reads
    them from settings ``ZICO_CODE_MAX_BYTES``, ``ZICO_CODE_MAX_UNPACKED_BYTES``, ``ZICO_CODE_MAX_FILES``,
    ``ZICO_CODE_MAX_RATIO`` and sends them to the worker in the run spec's ``code_limits``):

    * format: gzip-compressed tar or zip, told by its first bytes (not its name); anything else, a corrupt
      stream, an encrypted zip member or a CRC mismatch is "not a valid tar.gz or zip archive";
    * size: the archive at most ``max_bytes`` (64 MiB); the regular files' bytes together at most
      ``max_unpacked_bytes`` (512 MiB); more than ``ratio_floor_bytes`` (8 MiB) unpacked *and* more than
      ``max_ratio`` (200) times the archive's own size is a compression bomb. The decompressed stream is
      counted as it is read, so a header that lies about sizes cannot get past the limits;
    * count: at most ``max_files`` members of any kind (10 000);
    * names (:func:`check_member_path`): relative POSIX paths, at most :data:`MAX_PATH_BYTES` bytes and
      :data:`MAX_NAME_BYTES` per component, no ``..`` component, no absolute path or drive letter, no
      backslash, control character or empty component; a leading ``./`` is dropped; a name given twice, or
      a file that is also another member's directory, is refused;
    * kinds: regular files, directories, symbolic links whose target (relative, resolved lexically from the
      link's own directory) stays inside the archive, and tar hard links to an earlier regular file of the
      archive. Device files, FIFOs, sockets and other kinds are refused; so is a member whose path goes
      *through* a symbolic link of the archive (the classic way to write outside through a link).

    Extraction writes into an empty directory only, creates files with ``O_EXCL | O_NOFOLLOW`` and mode
    0644 (0755 when the member had an execute bit; never setuid/setgid), directories 0755, copies a hard
    link's content, and removes everything it wrote when a later member breaks a rule. ``tarfile``'s own
    ``filter="data"`` (Python >= 3.11.4) does part of this, but its realpath-based check had bypasses
    (CVE-2025-4517 and others, fixed in later patch releases than 3.11.7); the rules here are lexical and
    stricter, so they do not depend on the Python patch level.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import posixpath
import shutil
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from typing import IO, Callable, Iterator

MIB = 1 << 20
MAX_PATH_BYTES = 1024  # UTF-8 bytes of a member's whole path
MAX_NAME_BYTES = 255  # UTF-8 bytes of one path component (ext4, XFS)
MAX_LINK_TARGET_BYTES = 1024
FORMATS = ("tar.gz", "zip")
CHUNK = 1 << 16


class ArchiveError(ValueError):
    """The archive breaks a rule of Note [Code archive limits]; ``member`` names the entry (None: the whole
    archive) and ``problem`` says what is wrong."""

    def __init__(self, problem: str, member: str | None = None):
        super().__init__(f"{member}: {problem}" if member else problem)
        self.problem, self.member = problem, member


@dataclass(frozen=True)
class ArchiveLimits:
    """The limits of Note [Code archive limits] (bytes, counts, a ratio)."""

    max_bytes: int = 64 * MIB
    max_unpacked_bytes: int = 512 * MIB
    max_files: int = 10_000
    max_ratio: float = 200.0
    ratio_floor_bytes: int = 8 * MIB

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ArchiveLimits":
        """Raises ArchiveError for an unknown key or a value that is not a positive number."""
        if not isinstance(d, dict):
            raise ArchiveError(f"code_limits: expected an object, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        for k, v in d.items():
            if k not in names:
                raise ArchiveError(f"code_limits: unknown limit {k!r}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ArchiveError(f"code_limits.{k}: expected a positive number, got {v!r}")
        return cls(**d)


@dataclass(frozen=True)
class ArchiveInfo:
    """What a valid archive holds: ``format`` (one of FORMATS), ``size_bytes`` (the archive), ``files``
    (regular files, hard links included), ``members`` (entries of any kind), ``unpacked_bytes`` (the regular
    files' bytes together)."""

    format: str
    size_bytes: int
    files: int
    members: int
    unpacked_bytes: int


def check_member_path(name: object) -> str:
    """``name`` as a normalised relative POSIX path (a leading ``./`` and a trailing ``/`` dropped), or
    ArchiveError naming the problem (rules: Note [Code archive limits]). Also the rule for output file paths
    a worker uploads. Returns "" for the archive's root itself (``.`` or ``./``)."""
    if not isinstance(name, str):
        raise ArchiveError("path is not text")
    shown = name[:200]
    if "\x00" in name:
        raise ArchiveError("NUL character in path", shown)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise ArchiveError("control character in path", shown)
    if "\\" in name:
        raise ArchiveError("backslash in path (archive paths use '/')", shown)
    if name.startswith("/"):
        raise ArchiveError("absolute path", shown)
    if len(name) >= 2 and name[1] == ":" and name[0].isalpha():
        raise ArchiveError("drive letter in path", shown)
    if len(name.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise ArchiveError(f"path longer than {MAX_PATH_BYTES} bytes", shown[:80] + "...")
    parts = name.rstrip("/").split("/")
    while parts and parts[0] == ".":
        parts.pop(0)
    for part in parts:
        if part == "..":
            raise ArchiveError("'..' in path (it would leave the project directory)", shown)
        if part in ("", "."):
            raise ArchiveError("empty or '.' component in path", shown)
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise ArchiveError(f"a path component is longer than {MAX_NAME_BYTES} bytes", shown)
    return "/".join(parts)


def _check_link_target(path: str, target: object) -> None:
    if not isinstance(target, str) or not target or "\x00" in target:
        raise ArchiveError("symbolic link with an empty or invalid target", path)
    if len(target.encode("utf-8", "surrogateescape")) > MAX_LINK_TARGET_BYTES:
        raise ArchiveError(f"symbolic link target longer than {MAX_LINK_TARGET_BYTES} bytes", path)
    if target.startswith("/") or "\\" in target:
        raise ArchiveError(f"symbolic link to an absolute path ({target[:100]!r})", path)
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        raise ArchiveError(f"symbolic link pointing outside the archive ({target[:100]!r})", path)


@dataclass
class _Entry:
    path: str
    kind: str  # file | dir | symlink | hardlink
    size: int = 0
    target: str = ""
    executable: bool = False
    open: Callable[[], IO[bytes]] | None = None  # a reader of the file's bytes (kind file)


class _Ledger:
    """The rules that span members: count, names given twice, files that are directories, paths through links."""

    def __init__(self, limits: ArchiveLimits):
        self.limits = limits
        self.kinds: dict[str, str] = {}
        self.parents: set[str] = set()
        self.members = self.files = self.unpacked = 0
        self.links: list[_Entry] = []

    def admit(self, e: _Entry) -> None:
        self.members += 1
        if self.members > self.limits.max_files:
            raise ArchiveError(f"more than {self.limits.max_files} members (the limit of files per archive)")
        if e.path in self.kinds:
            if e.kind == "dir" and self.kinds[e.path] == "dir":
                return
            raise ArchiveError("appears twice in the archive", e.path)
        if e.path in self.parents and e.kind != "dir":
            raise ArchiveError("is both a file and a directory", e.path)
        parts = e.path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            kind = self.kinds.get(prefix)
            if kind == "symlink":
                raise ArchiveError(f"path goes through the symbolic link {prefix!r}", e.path)
            if kind is not None and kind != "dir":
                raise ArchiveError(f"is inside {prefix!r}, which is a file", e.path)
            self.parents.add(prefix)
        if e.kind == "symlink":
            _check_link_target(e.path, e.target)
            self.links.append(e)
        if e.kind == "hardlink" and self.kinds.get(e.target) != "file":
            raise ArchiveError(f"hard link to {e.target[:100]!r}, which is not an earlier file of the archive",
                               e.path)
        self.kinds[e.path] = "file" if e.kind == "hardlink" else e.kind
        if e.kind in ("file", "hardlink"):
            self.files += 1
        if e.kind == "file":
            self.add_bytes(e.size, e.path)

    def check_links(self) -> None:
        """No link's target walks through another link of the archive (``y -> sub/up/..`` with ``sub/up -> ..``
        resolves outside, though each target stays inside when read lexically)."""
        for e in self.links:
            parts = e.path.split("/")[:-1]
            steps = e.target.split("/")
            for i, step in enumerate(steps):
                if step == "..":
                    parts.pop()
                elif step not in ("", "."):
                    parts.append(step)
                if i < len(steps) - 1 and self.kinds.get("/".join(parts)) == "symlink":
                    raise ArchiveError(f"symbolic link whose target goes through the symbolic link "
                                       f"{'/'.join(parts)!r}", e.path)

    def add_bytes(self, n: int, member: str | None = None) -> None:
        self.unpacked += n
        if self.unpacked > self.limits.max_unpacked_bytes:
            raise ArchiveError(f"unpacks to more than {self.limits.max_unpacked_bytes} bytes "
                               "(the limit of unpacked bytes)", member)


class _Counting:
    """A read-only stream over ``raw`` that raises ArchiveError once more than ``limit`` bytes came out."""

    def __init__(self, raw: IO[bytes], limit: int):
        self.raw, self.limit, self.count = raw, limit, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.count += len(data)
        if self.count > self.limit:
            raise ArchiveError(f"the tar stream inside the gzip unpacks to more than {self.limit} bytes "
                               "(the limit of unpacked bytes)")
        return data


def _tar_entries(f: IO[bytes], limits: ArchiveLimits) -> Iterator[_Entry]:
    # headers and padding: at most 2 blocks of 512 bytes per member, plus the end-of-archive blocks
    stream = _Counting(gzip.GzipFile(fileobj=f, mode="rb"), limits.max_unpacked_bytes + 1024 * limits.max_files
                       + 20 * 512)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for m in tar:
                path = check_member_path(m.name)
                if m.isdir():
                    if path:
                        yield _Entry(path, "dir")
                elif not path:
                    raise ArchiveError("the archive's root is not a directory")
                elif m.issparse():
                    raise ArchiveError("sparse file (not supported)", path)
                elif m.isreg():
                    yield _Entry(path, "file", m.size, executable=bool(m.mode & 0o111),
                                 open=lambda m=m: tar.extractfile(m))
                elif m.issym():
                    yield _Entry(path, "symlink", target=m.linkname)
                elif m.islnk():
                    yield _Entry(path, "hardlink", target=check_member_path(m.linkname))
                elif m.ischr() or m.isblk() or m.isfifo():
                    raise ArchiveError("device file or FIFO (only files, directories and links are allowed)",
                                       path)
                else:
                    raise ArchiveError(f"unsupported member type {m.type!r}", path)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ArchiveError(f"not a valid tar.gz archive ({type(exc).__name__}: {exc})") from None


def _zip_entries(f: IO[bytes], limits: ArchiveLimits) -> Iterator[_Entry]:
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ArchiveError(f"not a valid zip archive ({exc})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_files:
            raise ArchiveError(f"more than {limits.max_files} members (the limit of files per archive)")
        declared = sum(i.file_size for i in infos)
        if declared > limits.max_unpacked_bytes:
            raise ArchiveError(f"unpacks to more than {limits.max_unpacked_bytes} bytes "
                               "(the limit of unpacked bytes)")
        for info in infos:
            path = check_member_path(info.filename)
            if info.flag_bits & 0x1:
                raise ArchiveError("encrypted zip member", path)
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if info.is_dir() or kind == stat.S_IFDIR:
                if path:
                    yield _Entry(path, "dir")
                continue
            if not path:
                raise ArchiveError("the archive's root is not a directory")
            if kind == stat.S_IFLNK:
                if info.file_size > MAX_LINK_TARGET_BYTES:
                    raise ArchiveError(f"symbolic link target longer than {MAX_LINK_TARGET_BYTES} bytes", path)
                target = zf.read(info).decode("utf-8", "replace")
                yield _Entry(path, "symlink", target=target)
            elif kind in (0, stat.S_IFREG):
                yield _Entry(path, "file", info.file_size, executable=bool(mode & 0o111),
                             open=lambda info=info: zf.open(info))
            elif kind in (stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO, stat.S_IFSOCK):
                raise ArchiveError("device file or FIFO (only files, directories and links are allowed)", path)
            else:
                raise ArchiveError(f"unsupported member type (mode {oct(mode)})", path)


def detect_format(path: str | os.PathLike) -> str:
    """``"tar.gz"`` or ``"zip"`` from the file's first bytes; ArchiveError for anything else."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:2] == b"\x1f\x8b":
        return "tar.gz"
    if head in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    raise ArchiveError("not a tar.gz or zip archive (its first bytes are neither gzip's nor zip's)")


def _walk(path, limits: ArchiveLimits, sink: Callable[[_Entry, _Ledger], None]) -> ArchiveInfo:
    size = os.path.getsize(path)
    if size > limits.max_bytes:
        raise ArchiveError(f"the archive is {size} bytes, over the limit of {limits.max_bytes} bytes")
    fmt = detect_format(path)
    ledger = _Ledger(limits)
    with open(path, "rb") as f:
        entries = _tar_entries(f, limits) if fmt == "tar.gz" else _zip_entries(f, limits)
        try:
            for e in entries:
                ledger.admit(e)
                sink(e, ledger)
        except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno is not None:
                raise  # a real I/O error of the disk we write to, not a bad archive
            raise ArchiveError(f"not a valid {fmt} archive ({type(exc).__name__}: {exc})") from None
    ledger.check_links()
    ratio_base = max(size, 1)
    if ledger.unpacked > limits.ratio_floor_bytes and ledger.unpacked / ratio_base > limits.max_ratio:
        raise ArchiveError(f"compression ratio {ledger.unpacked / ratio_base:.0f}:1 is over the limit of "
                           f"{limits.max_ratio:g}:1 ({ledger.unpacked} bytes from {size}): a compression bomb?")
    return ArchiveInfo(fmt, size, ledger.files, ledger.members, ledger.unpacked)


def _copy(e: _Entry, ledger: _Ledger, out: IO[bytes] | None) -> None:
    """Read the member's bytes (all of them: a CRC or a short stream fails here), counting against its size."""
    got = 0
    with e.open() as src:
        while chunk := src.read(CHUNK):
            got += len(chunk)
            if got > e.size:
                raise ArchiveError("holds more bytes than its header says", e.path)
            if out is not None:
                out.write(chunk)
    if got != e.size:
        raise ArchiveError(f"holds {got} bytes, its header says {e.size}", e.path)


def inspect_archive(path: str | os.PathLike, limits: ArchiveLimits = ArchiveLimits()) -> ArchiveInfo:
    """Check the archive at ``path`` against every rule of Note [Code archive limits] without writing anything.

    Reads the whole archive once (each member's bytes are decompressed and counted). Raises ArchiveError.
    """
    return _walk(path, limits, lambda e, ledger: _copy(e, ledger, None) if e.kind == "file" else None)


def extract_archive(path: str | os.PathLike, dest: str | os.PathLike,
                    limits: ArchiveLimits = ArchiveLimits()) -> ArchiveInfo:
    """Extract the archive at ``path`` into ``dest`` (created if missing; must be empty), checking every rule
    of Note [Code archive limits] as it goes. On ArchiveError nothing extracted is left in ``dest``."""
    dest = os.fspath(dest)
    os.makedirs(dest, mode=0o755, exist_ok=True)
    if os.listdir(dest):
        raise ArchiveError(f"extraction directory {dest} is not empty")

    def write(e: _Entry, ledger: _Ledger) -> None:
        target = os.path.join(dest, *e.path.split("/"))
        if e.kind == "dir":
            os.makedirs(target, mode=0o755, exist_ok=True)
            return
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if e.kind == "symlink":
            os.symlink(e.target, target)
            return
        mode = 0o755 if e.executable else 0o644
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
        with os.fdopen(fd, "wb") as out:
            if e.kind == "hardlink":
                with open(os.path.join(dest, *e.target.split("/")), "rb") as src:
                    shutil.copyfileobj(src, out)
            else:
                _copy(e, ledger, out)

    try:
        return _walk(path, limits, write)
    except BaseException:
        for name in os.listdir(dest):
            p = os.path.join(dest, name)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
        raise
