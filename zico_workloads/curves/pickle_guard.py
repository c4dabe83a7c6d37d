"""Load an untrusted pickle of plain data within bounds: an opcode pre-pass, then a restricted unpickler.

Note [Bounding a pickle before loading it]
A refusing ``find_class`` stops code execution, but not resource use: the C unpickler sizes its memo
to the largest index it sees (a 9-byte file with ``LONG_BINPUT 2**30`` asks for 16 GiB), keeps every
``MARK`` and every pushed object, and builds whatever nesting and list lengths the file spells out.
``check_pickle`` walks the opcodes once, as the unpickler would, but keeps only a placeholder per
object (its nesting depth and length), and refuses the file at the first opcode that crosses a limit:

- only the opcodes of plain values load (None, bool, int, float, str, bytes, list, tuple, dict and the
  memo/stack/framing opcodes); imports, object construction, persistent ids, sets and buffers are
  refused by name;
- a memo index may be at most the number of entries so far (pickle's own Pickler numbers them
  0, 1, 2, ...), so the memo never outgrows what was put in it, and at most ``MAX_MEMO`` entries;
- ``MAX_OPCODES`` opcodes in all, ``MAX_OBJECTS`` values created (a memo ``GET`` creates none),
  ``MAX_STACK`` entries on the stack (and as many marks), ``MAX_DEPTH`` levels of nesting,
  ``max_items`` entries in any one list, tuple or dict, ``MAX_STRING_BYTES`` per str or bytes and
  ``MAX_INT_BYTES`` per integer; a length that runs past the file's end is a truncated file.

Nesting is tracked exactly: a container's depth is fixed when its children go in, and a list or dict
changed after it was itself put inside another container is refused (the Pickler finishes each
container before using it; only such a change could hide depth from this pass, and only a cyclic
structure makes the Pickler write one, which a memory snapshot never holds).
The pass is pure Python, ~0.25 us of CPU per opcode; ``MAX_OPCODES`` bounds its time too.
"""
from __future__ import annotations

import io
import pickle
import struct
from typing import Any

MAX_OPCODES = 16_000_000      # a 100,000-event snapshot with stacks is ~5M opcodes (3.2 MB file: 0.9M)
MAX_OBJECTS = 4_000_000       # values built; ~100 bytes each once loaded, so ~0.4 GB at most
MAX_MEMO = MAX_OBJECTS        # memo entries (one per value at most)
MAX_STACK = 100_000           # stack entries, marks apart; the Pickler's batches keep both ~1,001 per level
MAX_DEPTH = 32                # a torch snapshot nests 6 (segments, segment, blocks, block, frames, frame)
MAX_STRING_BYTES = 1 << 20    # one str/bytes; the longest in real snapshots is a ~1 KB C++ frame name
MAX_INT_BYTES = 1024          # one integer (LONG1/LONG4 bytes; 2.5x that in decimal digits for INT/LONG)

_U4, _I4, _U8 = struct.Struct("<I"), struct.Struct("<i"), struct.Struct("<Q")
_REFUSED = {  # opcode -> what it would make; none of these appears in a plain-data pickle
    b"c"[0]: "an import (GLOBAL)", 0x93: "an import (STACK_GLOBAL)", b"i"[0]: "an import (INST)",
    b"R"[0]: "a call (REDUCE)", b"b"[0]: "an object's state (BUILD)", b"o"[0]: "an object (OBJ)",
    0x81: "an object (NEWOBJ)", 0x92: "an object (NEWOBJ_EX)", 0x82: "an extension (EXT1)",
    0x83: "an extension (EXT2)", 0x84: "an extension (EXT4)", b"P"[0]: "a persistent id (PERSID)",
    b"Q"[0]: "a persistent id (BINPERSID)", 0x8F: "a set (EMPTY_SET)", 0x90: "a set (ADDITEMS)",
    0x91: "a frozenset (FROZENSET)", 0x96: "a bytearray (BYTEARRAY8)", 0x97: "a buffer (NEXT_BUFFER)",
    0x98: "a buffer (READONLY_BUFFER)"}
# opcode -> (bytes of its length field, struct or None for one byte) for length-prefixed str/bytes/int
_SIZED = {b"T"[0]: (4, _I4), b"U"[0]: (1, None), b"X"[0]: (4, _U4), 0x8C: (1, None), 0x8D: (8, _U8),
          b"B"[0]: (4, _U4), b"C"[0]: (1, None), 0x8E: (8, _U8), 0x8A: (1, None), 0x8B: (4, _I4)}
_LONGS = (0x8A, 0x8B)
_FIXED = {b"J"[0]: 4, b"K"[0]: 1, b"M"[0]: 2, b"G"[0]: 8, b"N"[0]: 0, 0x88: 0, 0x89: 0}  # scalar: arg bytes
_TEXT_NUMBERS = (b"I"[0], b"L"[0], b"F"[0])
_TEXT_STRINGS = (b"S"[0], b"V"[0])
_TEXT = frozenset(_TEXT_NUMBERS + _TEXT_STRINGS + (b"g"[0], b"p"[0]))
_GETS = (b"g"[0], b"h"[0], b"j"[0])


class PickleRefused(ValueError):
    """The pickle crosses a limit or holds a non-plain opcode; the message names it and its byte offset."""


class _PlainUnpickler(pickle.Unpickler):
    """Loads only the pickle protocol's built-in plain types; refuses every import (a second line:
    ``check_pickle`` refuses those opcodes first)."""

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle's hook
        raise PickleRefused(
            f"refused: the pickle asks to import {module}.{name}; a memory snapshot holds only plain "
            "containers and scalars, so nothing was loaded or executed")

    def persistent_load(self, pid: Any):
        raise PickleRefused("refused: the pickle uses persistent ids; a memory snapshot does not")


def load_plain(data: bytes, max_items: int) -> Any:
    """The value pickled in ``data``, built only after ``check_pickle(data, max_items)`` passed.

    Raises:
        PickleRefused: as ``check_pickle``, or the C unpickler's own error (bad UTF-8, an
            unhashable dict key, ...) with its type and message.
    """
    check_pickle(data, max_items)
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except PickleRefused:
        raise
    except EOFError as exc:
        raise PickleRefused("the pickle is truncated (it ends before its STOP opcode)") from exc
    except (pickle.UnpicklingError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            MemoryError, RecursionError, UnicodeDecodeError, OverflowError) as exc:
        raise PickleRefused(f"not a readable pickle: {type(exc).__name__}: {exc}") from exc


def check_pickle(data: bytes, max_items: int) -> None:
    """Walk ``data``'s opcodes up to STOP and raise PickleRefused at the first one over a limit.

    Args:
        data: the whole pickle.
        max_items: the most entries any one list, tuple or dict may hold.
    Raises:
        PickleRefused: a refused opcode, a limit crossed (see the module note), a truncated or
            malformed stream (stack underflow, a memo index never put, an unknown opcode).
    Returns None when loading ``data`` stays within every limit.
    """
    stack: list = []   # None for a scalar, [depth, entries, inside_another] for a container
    marks: list[int] = []
    memo: list = []
    push, u4, max_stack = stack.append, _U4.unpack_from, MAX_STACK
    pos = start = objects = 0

    def refuse(what: str) -> PickleRefused:
        return PickleRefused(f"{what} (opcode at byte {start:,})")

    def grow(target, entries: int, first: int) -> None:
        """Move stack[first:] into ``target`` (``entries`` more entries), tracking its depth and length."""
        if type(target) is not list:
            raise refuse("APPEND/SETITEM onto a value that is not a list or dict")
        if target[2]:
            raise refuse("a list or dict is changed after it was put inside another container")
        target[1] += entries
        if target[1] > max_items:
            raise refuse(f"a list, tuple or dict grows past {max_items:,} entries")
        depth = target[0]
        for child in stack[first:]:
            if child is not None:
                child[2] = True
                if child[0] >= depth:
                    depth = child[0] + 1
        if depth > MAX_DEPTH:
            raise refuse(f"nesting deeper than {MAX_DEPTH} levels")
        target[0] = depth
        del stack[first:]

    try:
        for _ in range(MAX_OPCODES):
            start = pos
            op = data[pos]
            pos += 1
            if op == 0x6A:  # LONG_BINGET j: push a memo entry (no new value)
                push(memo[u4(data, pos)[0]])
                pos += 4
                if len(stack) > max_stack:
                    raise refuse(f"more than {max_stack:,} entries on the stack")
                continue
            if op == 0x68:  # BINGET h
                push(memo[data[pos]])
                pos += 1
                if len(stack) > max_stack:
                    raise refuse(f"more than {max_stack:,} entries on the stack")
                continue
            if op in _SIZED:  # length-prefixed str, bytes or integer
                width, fmt = _SIZED[op]
                n = data[pos] if fmt is None else fmt.unpack_from(data, pos)[0]
                pos += width + n
                limit = MAX_INT_BYTES if op in _LONGS else MAX_STRING_BYTES
                if n > limit or n < 0:
                    raise refuse(f"{'an integer' if op in _LONGS else 'a str or bytes'} of {n:,} bytes; "
                                 f"the limit is {limit:,}")
                push(None)
            elif op == 0x94 or op == 0x71 or op == 0x72:  # MEMOIZE, BINPUT q, LONG_BINPUT r
                if op == 0x94:
                    idx = len(memo)
                elif op == 0x71:
                    idx = data[pos]
                    pos += 1
                else:
                    idx = u4(data, pos)[0]
                    pos += 4
                _put(memo, idx, stack[-1], refuse)
                continue
            elif op in _FIXED:  # None, bools, fixed-width ints and floats
                pos += _FIXED[op]
                push(None)
            elif op == 0x28:  # MARK (
                marks.append(len(stack))
                if len(marks) > max_stack:
                    raise refuse(f"more than {max_stack:,} marks on the stack")
                continue
            elif op == 0x75 or op == 0x65:  # SETITEMS u, APPENDS e: from the mark into the value below it
                m = marks.pop()
                if m == 0:
                    raise IndexError
                k = len(stack) - m
                if op == 0x75 and k % 2:
                    raise refuse("SETITEMS with an odd number of keys and values")
                grow(stack[m - 1], k // 2 if op == 0x75 else k, m)
                continue
            elif op == 0x5D or op == 0x7D or op == 0x29:  # EMPTY_LIST ], EMPTY_DICT }, EMPTY_TUPLE )
                push([1, 0, False])
            elif op == 0x61 or op == 0x73:  # APPEND a, SETITEM s
                width = 1 if op == 0x61 else 2
                if len(stack) <= width:
                    raise IndexError
                grow(stack[-1 - width], 1, len(stack) - width)
                continue
            elif 0x85 <= op <= 0x87 or op == 0x74 or op == 0x6C or op == 0x64:  # TUPLE1-3; TUPLE, LIST, DICT
                first = len(stack) - (op - 0x84) if op >= 0x85 else marks.pop()
                if first < 0:
                    raise IndexError
                k = len(stack) - first
                if op == 0x64 and k % 2:
                    raise refuse("DICT with an odd number of keys and values")
                node = [1, 0, False]
                grow(node, k // 2 if op == 0x64 else k, first)
                push(node)
            elif op == 0x95:  # FRAME: an 8-byte length, then opcodes as usual
                if _U8.unpack_from(data, pos)[0] > len(data) - pos - 8:
                    raise refuse("a frame runs past the end of the pickle (truncated)")
                pos += 8
                continue
            elif op == 0x80:  # PROTO
                pos += 1
                continue
            elif op == 0x2E:  # STOP
                if len(stack) != 1 or marks:
                    raise refuse("STOP with a stack that does not hold exactly one value")
                return
            elif op == 0x30:  # POP (a mark, when nothing is above it)
                if marks and marks[-1] == len(stack):
                    marks.pop()
                else:
                    stack.pop()
                continue
            elif op == 0x31:  # POP_MARK
                del stack[marks.pop():]
                continue
            elif op == 0x32:  # DUP (no new value)
                push(stack[-1])
                if len(stack) > max_stack:
                    raise refuse(f"more than {max_stack:,} entries on the stack")
                continue
            elif op in _TEXT:  # protocol 0: a decimal, a quoted string or a memo index, up to a newline
                nl = data.find(b"\n", pos, pos + MAX_STRING_BYTES + 2)
                if nl < 0:
                    raise refuse("a text argument without its newline within the str limit")
                line, pos = data[pos:nl], nl + 1
                if op in _TEXT_NUMBERS and len(line) > 3 * MAX_INT_BYTES:
                    raise refuse(f"a decimal number of {len(line):,} characters")
                if op == 0x67 or op == 0x70:  # GET g, PUT p
                    if not 0 < len(line) <= 20 or not line.isdigit():
                        raise refuse("a memo index that is not a short decimal")
                    if op == 0x70:
                        _put(memo, int(line), stack[-1], refuse)
                        continue
                    push(memo[int(line)])
                    if len(stack) > max_stack:
                        raise refuse(f"more than {max_stack:,} entries on the stack")
                    continue
                push(None)
            elif op in _REFUSED:
                what = f"asks for {_REFUSED[op]}"
                if op == 0x63 or op == 0x69:  # GLOBAL / INST name the import: "module\nname\n"
                    name = ".".join(p.decode("utf-8", "replace") for p in data[pos:pos + 512].split(b"\n")[:2])
                    what = f"asks to import {name[:200]} ({'GLOBAL' if op == 0x63 else 'INST'})"
                raise refuse(f"refused: the pickle {what}; a memory snapshot holds only plain "
                             "containers and scalars, so nothing was loaded or executed")
            else:
                raise refuse(f"not a readable pickle: unknown opcode {op:#04x}")
            # here a new value was pushed
            objects += 1
            if objects > MAX_OBJECTS:
                raise refuse(f"more than {MAX_OBJECTS:,} values")
            if len(stack) > max_stack:
                raise refuse(f"more than {max_stack:,} entries on the stack")
    except (IndexError, struct.error):  # past the end, an empty stack or marks, or a GET never put
        if pos >= len(data):
            raise refuse("the pickle is truncated (it ends before its STOP opcode)") from None
        if data[start] in _GETS:
            raise refuse("a memo GET of an index never put") from None
        raise refuse("not a readable pickle: stack underflow") from None
    start = pos
    raise refuse(f"more than {MAX_OPCODES:,} opcodes")


def _put(memo: list, idx: int, value, refuse) -> None:
    """memo[idx] = value, where idx may be at most len(memo) (dense, as the Pickler numbers entries)."""
    if idx < len(memo):
        memo[idx] = value
    elif idx == len(memo) < MAX_MEMO:
        memo.append(value)
    else:
        raise refuse(f"memo index {idx:,} skips past the {len(memo):,} entries put so far"
                     if idx > len(memo) else f"more than {MAX_MEMO:,} memo entries")
