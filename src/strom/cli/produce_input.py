"""Input templates of ``strom produce -f`` (like ``rpk topic produce -f``) and their reader.

A template is literal text and fields; each field is read up to the literal that follows it,
so two fields must be separated by a literal. The literal at the end delimits records (a
template that does not end with one gets ``\\n``: one record a line).

======  =========================================================================
``%v``  the value                        ``%k``  the key
``%p``  the partition (an integer)       ``%T``  the timestamp (epoch milliseconds)
``%H``  headers: ``key=value`` pairs separated by commas (``trace=1,src=gps``)
``%t``  the topic (must be the topic given on the command line)
``%%``  a percent sign;   ``\\n`` ``\\t`` ``\\r`` ``\\\\``  newline, tab, CR, backslash
======  =========================================================================

Examples: ``'%v\\n'`` (default), ``'%k:%v\\n'``, ``'%k\\t%H\\t%v\\n'``, ``'%p %k %v\\n'``.
Records are read as the input arrives (``tail -f log | strom produce``), never all at once.
Line numbers count input lines from 1, so an error names the line the record starts on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from strom.cli.errors import CliError

FIELDS = {"v": "value", "k": "key", "p": "partition", "T": "timestamp", "H": "headers", "t": "topic"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0"}
DEFAULT_TEMPLATE = "%v\\n"


def unescape(text: str) -> str:
    """Backslash escapes of a command-line template (``\\n`` typed as two characters)."""
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in _ESCAPES:
            out.append(_ESCAPES[text[i + 1]])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_template(text: str) -> list[tuple[str, bytes]]:
    """Tokens ``("field", b"value")`` / ``("lit", b"...")``; a :class:`CliError` if unusable."""
    source = unescape(text)
    tokens: list[tuple[str, bytes]] = []
    literal: list[str] = []
    i = 0
    while i < len(source):
        ch = source[i]
        if ch != "%":
            literal.append(ch)
            i += 1
            continue
        spec = source[i + 1 : i + 2]
        if spec == "%":
            literal.append("%")
        elif spec in FIELDS:
            if literal:
                tokens.append(("lit", "".join(literal).encode()))
                literal = []
            elif tokens and tokens[-1][0] == "field":
                raise CliError(f"invalid format {text!r}: put a separator between %{spec} and "
                               "the field before it")
            name = FIELDS[spec]
            if ("field", name.encode()) in tokens:
                raise CliError(f"invalid format {text!r}: %{spec} appears twice")
            tokens.append(("field", name.encode()))
        else:
            raise CliError(
                f"invalid format {text!r}: unknown field %{spec or ''} "
                f"(known: {' '.join('%' + k for k in FIELDS)})"
            )
        i += 2
    if literal:
        tokens.append(("lit", "".join(literal).encode()))
    if not tokens or tokens[-1][0] != "lit":
        tokens.append(("lit", b"\n"))
    if not any(kind == "field" and name == b"value" for kind, name in tokens):
        raise CliError(f"invalid format {text!r}: %v (the value) is missing")
    return tokens


class Record:
    """One parsed input record, or the reason it could not be parsed (``error``)."""

    __slots__ = ("line", "fields", "error")

    def __init__(
        self, line: int, fields: dict[str, bytes] | None = None, error: str | None = None
    ) -> None:
        self.line = line
        self.fields: dict[str, bytes] = {} if fields is None else fields
        self.error = error


class _Buffered:
    """Reads a binary stream in chunks as they arrive, counting the newlines consumed.

    ``buf[pos:]`` is unread; the consumed prefix is dropped only when more is read, so taking
    a record costs its own length, not the buffer's."""

    def __init__(self, source: BinaryIO) -> None:
        self.source = source
        self.buf = b""
        self.pos = 0
        self.eof = False
        self.line = 1

    def _fill(self) -> None:
        read1 = getattr(self.source, "read1", None)
        chunk = read1(65536) if read1 is not None else self.source.read(65536)
        if chunk:
            self.buf = self.buf[self.pos :] + chunk
            self.pos = 0
        else:
            self.eof = True

    def _left(self) -> int:
        return len(self.buf) - self.pos

    def at_end(self) -> bool:
        while not self._left() and not self.eof:
            self._fill()
        return not self._left() and self.eof

    def _take(self, n: int) -> bytes:
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        self.line += data.count(b"\n")
        return data

    def until(self, delim: bytes, stop: bytes | None = None) -> tuple[bytes, bool]:
        """Bytes before ``delim`` (left in the stream), or ``(bytes, False)`` when ``stop``
        (the record delimiter) or the end of input comes first."""
        start = self.pos
        while True:
            pos = self.buf.find(delim, start)
            cut = self.buf.find(stop, start) if stop else -1
            if cut >= 0 and (pos < 0 or cut < pos):
                return self._take(cut - self.pos), False
            if pos >= 0:
                return self._take(pos - self.pos), True
            if self.eof:
                return self._take(self._left()), False
            keep = max(len(delim), len(stop or b"")) - 1
            offset = max(self.pos, len(self.buf) - keep) - self.pos
            self._fill()
            start = self.pos + offset

    def expect(self, literal: bytes) -> bool:
        """Consume ``literal`` if the input continues with it."""
        while self._left() < len(literal) and not self.eof:
            self._fill()
        if self.buf.startswith(literal, self.pos):
            self._take(len(literal))
            return True
        return False


def read_records(source: BinaryIO, tokens: list[tuple[str, bytes]]) -> Iterator[Record]:
    """Parse ``source`` record by record; a malformed record is yielded with its ``error``."""
    if tokens[-1][1] == b"\n" and not any(b"\n" in t for k, t in tokens[:-1] if k == "lit"):
        return _read_lines(source, tokens)
    return _read_stream(source, tokens)


def _read_lines(source: BinaryIO, tokens: list[tuple[str, bytes]]) -> Iterator[Record]:
    """The common case, one record a line: C-speed line iteration, then a split per line."""
    inner = tokens[:-1]
    if inner == [("field", b"value")]:  # the default '%v\n': nothing to split
        for number, raw in enumerate(source, 1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            yield Record(number, {"value": line[:-1] if line.endswith(b"\r") else line})
        return
    for number, raw in enumerate(source, 1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]  # CRLF input
        record = Record(number)
        pos = 0
        for index, (kind, text) in enumerate(inner):
            if kind == "lit":
                if not line.startswith(text, pos):
                    record.error = f"expected {text.decode(errors='replace')!r} here"
                    break
                pos += len(text)
            elif index == len(inner) - 1:
                record.fields[text.decode()] = line[pos:]
            else:
                delim = inner[index + 1][1]
                end = line.find(delim, pos)
                if end < 0:
                    record.error = (
                        f"expected {delim.decode(errors='replace')!r} after the {text.decode()}"
                    )
                    break
                record.fields[text.decode()] = line[pos:end]
                pos = end
        if record.error is not None:
            record.fields = {}
        yield record


def _read_stream(source: BinaryIO, tokens: list[tuple[str, bytes]]) -> Iterator[Record]:
    """Records that span lines (or end with another delimiter), read as the bytes arrive."""
    stream = _Buffered(source)
    end = tokens[-1][1]
    while not stream.at_end():
        record = Record(stream.line)
        for index, (kind, text) in enumerate(tokens):
            if kind == "lit":
                if index == len(tokens) - 1:
                    stream.expect(text)  # the final delimiter may be missing at the very end
                elif not stream.expect(text):
                    record.error = f"expected {text.decode(errors='replace')!r} here"
                    break
                continue
            delim = tokens[index + 1][1]
            last = index == len(tokens) - 2
            data, found = stream.until(delim, None if last or delim == end else end)
            if not found and not last:
                record.error = f"expected {delim.decode(errors='replace')!r} after the {text.decode()}"
                break
            if end == b"\n" and last and data.endswith(b"\r"):
                data = data[:-1]  # CRLF input
            record.fields[text.decode()] = data
        if record.error is not None:
            stream.until(end)  # skip the rest of the bad record
            stream.expect(end)
        yield record
