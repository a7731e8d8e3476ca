"""How ``strom consume`` writes a message: text, JSON lines, or an rpk/kcat-like template.

Template fields (``-f '%k %p %o %T %v\\n'``):

======  ====================================  ======  ==================================
``%t``  topic                                 ``%p``  partition
``%o``  offset                                ``%T``  timestamp, epoch milliseconds
``%d``  timestamp, ISO 8601 UTC               ``%k``  key (``--value-encoding`` applies)
``%v``  value (``--value-encoding`` applies)  ``%K``  key length in bytes (-1: null)
``%V``  value length in bytes (-1: null)      ``%h``  headers ``k=v`` joined by ``,``
``%S``  as ``%V`` (kcat's name for it)        ``%%``  a percent sign
======  ====================================  ======  ==================================

and the escapes ``\\n`` ``\\t`` ``\\r`` ``\\\\``.

JSON lines (``--format json``) have one stable shape per message::

    {"topic": "t", "partition": 0, "offset": 5, "timestamp": 1700000000000,
     "timestamp_iso": "2023-11-14T22:13:20.000Z", "timestamp_type": "CreateTime",
     "key": "k", "value": "v", "headers": [["h", "v"]]}

``key``/``value``/header values are text decoded as UTF-8 (invalid bytes replaced) unless
``--value-encoding base64|hex`` is given; a null key or value is JSON ``null``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from strom.admin.timestamps import TIMESTAMP_TYPES, iso_ms
from strom.cli.errors import CliError
from strom.cli.produce_input import unescape

ENCODINGS = ("utf8", "base64", "hex")


def encode(data: bytes | str | None, encoding: str | None) -> str | None:
    """Bytes as text in ``encoding`` (utf8 replaces invalid sequences); None stays None."""
    if data is None:
        return None
    raw = data.encode() if isinstance(data, str) else data
    if encoding == "base64":
        return base64.b64encode(raw).decode()
    if encoding == "hex":
        return raw.hex()
    return raw.decode("utf-8", errors="replace")


def _timestamp(msg: Message) -> tuple[int | None, str | None]:
    ts_type, ts = msg.timestamp()
    if ts_type == TIMESTAMP_NOT_AVAILABLE:
        return None, None
    return ts, TIMESTAMP_TYPES.get(ts_type)


def _headers(msg: Message) -> list[tuple[str, Any]]:
    return list(msg.headers() or [])  # type: ignore[arg-type]


def message_json(msg: Message, encoding: str | None) -> bytes:
    """One message as a JSON line (see the module docstring for the shape)."""
    ts, ts_type = _timestamp(msg)
    document = {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": ts,
        "timestamp_iso": iso_ms(ts) if ts is not None else None,
        "timestamp_type": ts_type,
        "key": encode(msg.key(), encoding),
        "value": encode(msg.value(), encoding),
        "headers": [[k, encode(v, encoding)] for k, v in _headers(msg)],
    }
    return json.dumps(document, ensure_ascii=False).encode() + b"\n"


def _raw(data: bytes | str | None, encoding: str | None) -> bytes:
    if data is None:
        return b""
    if encoding is None:
        return data.encode() if isinstance(data, str) else data
    return (encode(data, encoding) or "").encode()


def _length(data: bytes | str | None) -> bytes:
    return b"-1" if data is None else str(len(data)).encode()


def compile_template(template: str, encoding: str | None) -> Callable[[Message], bytes]:
    """A function rendering a message with ``template``; a :class:`CliError` if malformed."""
    fields: dict[str, Callable[[Message], bytes]] = {
        "t": lambda m: (m.topic() or "").encode(),
        "p": lambda m: str(m.partition()).encode(),
        "o": lambda m: str(m.offset()).encode(),
        "T": lambda m: str(_timestamp(m)[0] if _timestamp(m)[0] is not None else -1).encode(),
        "d": lambda m: iso_ms(_timestamp(m)[0] or 0).encode(),
        "k": lambda m: _raw(m.key(), encoding),
        "v": lambda m: _raw(m.value(), encoding),
        "K": lambda m: _length(m.key()),
        "V": lambda m: _length(m.value()),
        "S": lambda m: _length(m.value()),  # kcat's "message size": the value's length
        "h": lambda m: b",".join(
            k.encode() + b"=" + _raw(v, encoding) for k, v in _headers(m)
        ),
    }
    source = unescape(template)
    parts: list[bytes | Callable[[Message], bytes]] = []
    i = 0
    while i < len(source):
        ch = source[i]
        if ch != "%":
            parts.append(ch.encode())
            i += 1
            continue
        spec = source[i + 1 : i + 2]
        if spec == "%":
            parts.append(b"%")
        elif spec in fields:
            parts.append(fields[spec])
        else:
            known = " ".join("%" + k for k in fields)
            raise CliError(f"invalid format {template!r}: unknown field %{spec} (known: {known})")
        i += 2

    def render(msg: Message) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(msg) for p in parts)

    return render


def text_line(print_key: bool, separator: bytes) -> Callable[[Message], bytes]:
    """The default text output: value, or ``key SEP value``; a null prints as ``null``."""

    def render(msg: Message) -> bytes:
        value = msg.value()
        line = b"null" if value is None else _raw(value, None)
        if print_key:
            key = msg.key()
            line = (b"null" if key is None else _raw(key, None)) + separator + line
        return line + b"\n"

    return render
