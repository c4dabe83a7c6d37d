"""A job's stdout/stderr bytes cut into lines for the agent's log, its stderr tail and ``JobRun.on_output``.

A line ends at ``\\n`` or at ``\\r`` (a progress bar redrawing its line, as tqdm does, is one line per redraw;
the ``\\n`` of a ``\\r\\n`` pair ends nothing more); a run of ``\\r`` is one (redrawing nothing is no line), so
20 MiB of bare carriage returns are not 20 million lines (Note [A job's output is bounded] in workers.usercode).
A line longer than the cap keeps its first ``cap`` bytes and ends with ``... [N bytes cut]``; nothing is held
beyond the cap, however long the line. Bytes that are not UTF-8 are replaced (U+FFFD).
"""
from __future__ import annotations

import re

_SPLIT = re.compile(rb"(\r|\n)")
_CR_RUN = re.compile(rb"\r{2,}")


class LineCutter:
    """Feed bytes in any pieces (:meth:`feed`), get whole lines back; :meth:`close` returns an unfinished one."""

    def __init__(self, cap_bytes: int):
        if cap_bytes < 1:
            raise ValueError(f"cap_bytes must be >= 1, got {cap_bytes}")
        self.cap = cap_bytes
        self._buf = bytearray()
        self._cut = 0
        self._after_cr = False

    def feed(self, data: bytes) -> list[str]:
        lines = []
        for piece in _SPLIT.split(_CR_RUN.sub(b"\r", data)):
            if piece == b"\n" and self._after_cr:  # \r\n: the \r ended the line already
                self._after_cr = False
            elif piece in (b"\r", b"\n"):
                lines.append(self._take())
                self._after_cr = piece == b"\r"
            elif piece:
                self._after_cr = False
                room = max(self.cap - len(self._buf), 0)
                self._buf += piece[:room]
                self._cut += len(piece) - min(room, len(piece))
        return lines

    def close(self) -> list[str]:
        return [self._take()] if self._buf or self._cut else []

    def _take(self) -> str:
        text = self._buf.decode(errors="replace")
        if self._cut:
            text += f"... [{self._cut} bytes cut]"
        self._buf, self._cut = bytearray(), 0
        return text
