"""Uploading a file as multipart/form-data with a rich progress bar (on stderr, so that ``--json`` output on stdout
stays clean): a packed project to ``POST /api/code/``, a PyTorch snapshot to ``POST /api/jobs/{id}/profile/`` or
``POST /api/curves/``. The body is streamed from the file with its length known, so the bar follows the bytes as the
connection takes them."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

CHUNK = 64 * 1024


def _quoted(name: str) -> str:
    """A file name for a quoted multipart header: quotes and line breaks percent-encoded, as browsers send them."""
    return name.replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


class MultipartBody:
    """A file-like multipart body: form ``fields``, then ``path``'s bytes as the file field ``name``."""

    def __init__(self, fields: dict[str, str], name: str, path: Path, on_read: Callable[[int], None],
                 content_type: str = "application/gzip"):
        self.boundary = uuid.uuid4().hex
        head = b"".join(f"--{self.boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
                        for k, v in fields.items())
        head += (f"--{self.boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; "
                 f"filename=\"{_quoted(path.name)}\"\r\nContent-Type: {content_type}\r\n\r\n").encode()
        self.parts = [head, None, f"\r\n--{self.boundary}--\r\n".encode()]
        self.file = open(path, "rb")
        self.size = path.stat().st_size
        self.length = len(head) + self.size + len(self.parts[2])
        self.on_read = on_read
        self.index, self.offset = 0, 0

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def __len__(self) -> int:
        return self.length

    def read(self, n: int = -1) -> bytes:
        n = CHUNK if n is None or n < 0 else n
        while self.index < 3:
            if self.parts[self.index] is None:
                data = self.file.read(n)
                if data:
                    self.on_read(len(data))
                    return data
            else:
                part = self.parts[self.index]
                if self.offset < len(part):
                    data = part[self.offset:self.offset + n]
                    self.offset += len(data)
                    return data
            self.index, self.offset = self.index + 1, 0
        return b""

    def close(self) -> None:
        self.file.close()


def transfer_progress(label: str, show: bool) -> Progress:
    """A byte-counting progress bar on stderr (label, bar, bytes done/total, speed, time left); ``show`` False:
    a silent one (``--json``)."""
    return Progress(TextColumn(label), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True), disable=not show)


def upload_file(api, url: str, name: str, path: Path, fields: dict[str, str], *, content_type: str,
                label: str = "uploading", show_progress: bool = True) -> dict:
    """POST ``path`` as the file field ``name`` beside form ``fields`` to ``url``: the answer's JSON (200 or 201)."""
    progress = transfer_progress(label, show_progress)
    with progress:
        task = progress.add_task("upload", total=path.stat().st_size)
        body = MultipartBody(fields, name, path, lambda n: progress.advance(task, n), content_type)
        try:
            r = api.request("POST", url, ok=(200, 201), data=body,
                            headers={"Content-Type": body.content_type, "Content-Length": str(len(body))})
        finally:
            body.close()
    return r.json()


def upload_archive(api, path: Path, tenant: str | None, show_progress: bool = True) -> dict:
    """POST the archive at ``path`` to /api/code/ (to ``tenant`` when given): the archive's JSON."""
    return upload_file(api, "/api/code/", "archive", path, {"tenant": tenant} if tenant else {},
                       content_type="application/gzip", show_progress=show_progress)


def upload_snapshot(api, url: str, path: Path, fields: dict[str, str], show_progress: bool = True) -> dict:
    """POST the snapshot at ``path`` (field ``snapshot``) with form ``fields`` to ``url``: the stored curve's JSON."""
    return upload_file(api, url, "snapshot", path, fields, content_type="application/octet-stream",
                       label="uploading snapshot", show_progress=show_progress)
