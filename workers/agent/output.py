"""A job's stdout/stderr bytes cut into lines for the agent's log, its stderr tail and ``JobRun.on_output``.

A line ends at ``\\n`` or at ``\\r`` (a progress bar redrawing its line, as tqdm does, is one line per redraw;
the ``\\n`` of a ``\\r\\n`` pair ends nothing more); a run of ``\\r`` is one (redrawing nothing is no line), so
20 MiB of bare carriage returns are not 20 million lines (Note [A job's output is bounded] in workers.usercode).
A line longer than the cap keeps its first ``cap`` bytes and ends with ``... [N bytes cut]``; nothing is held
beyond the cap, however long the line. Bytes that are not UTF-8 are replaced (U+FFFD).

Note [A job's output rate]
    Every line a job prints costs the agent's process Python work (cut, escaped for the log, relayed), under the
    interpreter lock its gate round trips and memory watches need too: a job printing 100 MB as fast as it could
    (a million lines) slowed its neighbour's steps 2-4.7x, though it printed on a core of its own
    (tests/workers/test_containment_suite.py). So a job's lines are admitted at a rate, a token bucket
    (:class:`LineRate`: ``AgentSettings.output_lines_per_s``, ``ZICO_JOB_OUTPUT_LINES_PER_S``, bursts of ten
    seconds' worth); past it, stdout's bytes are counted and dropped without being cut into lines, and a system
    line says how many were dropped once the job's output is admitted again or ends; when it ends over the rate,
    its last ``OUTPUT_TAIL_LINES`` lines follow that note (a job's last words: "done", a final loss). stderr is
    still cut in full (its last lines are a failed job's reason) but its lines past the rate reach neither the
    log nor the relay.
"""
from __future__ import annotations

import collections
import re
import time
from typing import Callable

OUTPUT_TAIL_LINES = 20  # a stream's last lines, kept when it ends over the rate (Note [A job's output rate])
OUTPUT_TAIL_BYTES = 16384  # what is kept of its last bytes dropped uncut, to find them in
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

    def discard(self) -> None:
        """Forget the unfinished line (its bytes were dropped with the rest: Note [A job's output rate])."""
        self._buf, self._cut, self._after_cr = bytearray(), 0, False

    def _take(self) -> str:
        text = self._buf.decode(errors="replace")
        if self._cut:
            text += f"... [{self._cut} bytes cut]"
        self._buf, self._cut = bytearray(), 0
        return text


class LineRate:
    """A token bucket of lines: ``per_s`` lines a second on average, at most ``burst`` at once (default ten
    seconds' worth); Note [A job's output rate]."""

    def __init__(self, per_s: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic):
        if per_s <= 0:
            raise ValueError(f"per_s must be > 0, got {per_s}")
        self.per_s, self.burst, self._clock = float(per_s), float(burst if burst is not None else 10 * per_s), clock
        self._tokens, self._at = self.burst, clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_s)
        self._at = now

    def empty(self) -> bool:
        """No whole line may pass now."""
        self._refill()
        return self._tokens < 1

    def admit(self, n: int) -> int:
        """How many of ``n`` lines may pass now (taken from the bucket)."""
        self._refill()
        k = n if self._tokens >= n else int(self._tokens)
        self._tokens -= k
        return k


class OutputDrain:
    """One stream of a job (``"stdout"`` or ``"stderr"``) cut into lines under the output rate (Note [A job's
    output rate]). :meth:`feed` each chunk of bytes as read, then :meth:`close` at EOF; each returns the
    ``(stream, line)`` pairs to hand on in order: the stream's admitted lines, and ``"system"`` notes saying how many
    were dropped (at EOF over the rate, followed by the stream's last ``OUTPUT_TAIL_LINES`` lines). ``on_cut`` gets
    every line cut, admitted or not (a failed job's stderr tail). ``cap_bytes``: a line's cap; ``per_s``: lines a
    second; ``clock``: seconds, for tests. Raises ValueError for ``cap_bytes < 1`` or ``per_s <= 0``."""

    def __init__(self, stream: str, cap_bytes: int, per_s: float,
                 on_cut: Callable[[list[str]], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.stream, self.per_s, self._on_cut = stream, per_s, on_cut
        self._cap = cap_bytes
        self._cutter, self._rate = LineCutter(cap_bytes), LineRate(per_s, clock=clock)
        self._dropped = 0
        self._tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)  # last lines dropped
        self._raw_tail = b""  # or the last bytes dropped uncut

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        if not data:
            return self.close()
        if self.stream == "stdout" and self._rate.empty():  # past the rate: counted, never cut into lines
            self._dropped += data.count(b"\n") + data.count(b"\r")
            self._raw_tail = (self._raw_tail + data)[-OUTPUT_TAIL_BYTES:]
            self._tail.clear()
            self._cutter.discard()
            return []
        return self._pass(self._cutter.feed(data), end=False)

    def close(self) -> list[tuple[str, str]]:
        """What is left at EOF: the unfinished line, and the note on lines dropped with the stream's last lines."""
        return self._pass(self._cutter.close(), end=True)

    def _pass(self, lines: list[str], end: bool) -> list[tuple[str, str]]:
        if self._on_cut is not None and lines:
            self._on_cut(lines)
        out: list[tuple[str, str]] = []
        admitted = self._rate.admit(len(lines))
        if self._dropped and admitted:  # admitted again: say what was dropped before these lines
            out.append(("system", self._note([])))
            self._dropped, self._raw_tail = 0, b""
            self._tail.clear()
        out += [(self.stream, line) for line in lines[:admitted]]
        if admitted < len(lines):  # dropped in this chunk: counted, and kept as the last lines so far
            self._dropped += len(lines) - admitted
            self._tail.extend(lines[admitted:])
            self._raw_tail = b""
        if end and self._dropped:  # the stream ended over the rate: its last lines still reach the log
            last = list(self._tail) or self._whole_lines(self._raw_tail)
            out.append(("system", self._note(last)))
            out += [(self.stream, line) for line in last]
            self._dropped, self._raw_tail = 0, b""
            self._tail.clear()
        return out

    def _note(self, last: list[str]) -> str:
        return (f"about {self._dropped} lines of {self.stream} dropped: the job printed faster than "
                f"{self.per_s:g} lines a second (ZICO_JOB_OUTPUT_LINES_PER_S)"
                + (f"; its last {len(last)} follow" if last else ""))

    def _whole_lines(self, data: bytes) -> list[str]:
        """The last OUTPUT_TAIL_LINES whole lines of ``data``, the tail of a stream dropped uncut (its first line is
        a fragment when ``data`` is OUTPUT_TAIL_BYTES long)."""
        cutter = LineCutter(self._cap)
        lines = cutter.feed(data) + cutter.close()
        return lines[1 if len(data) >= OUTPUT_TAIL_BYTES else 0:][-OUTPUT_TAIL_LINES:]
