"""Walk a request body against its ``kio`` schema before ``kio`` decodes it.

Why: ``kio``'s native reader reserves memory for a compact array's claimed element count
before it checks that the bytes are there, so a 20-byte frame claiming 2**32 elements aborts
the whole process (see ``docs/upstream/kio-compact-array-reserve.md``). Python cannot catch an
abort, so nothing hostile may reach the reader: :func:`check_body` walks the body first and
bounds every declared length (compact and legacy arrays, strings, bytes, records, tagged
fields) by the bytes that remain. Each array element takes at least one byte, so a count above
the remaining bytes is malformed whatever the element type.

The walk also records every null the schema does not allow (a null ``topics`` array in
Produce, a null group name …): ``kio`` decodes those as ``None`` and the handler would trip
over them. Kafka's schemas say which fields are nullable and ``kio``'s classes carry that in
their type hints (``X | None``); :func:`strom.protocol.kio_fields.field_shape` reads those hints
the way ``kio``'s serializer does, so both agree on what a field is.

Encoding (Kafka's): non-flexible versions use int16-length strings, int32-length bytes and
arrays (-1 = null); flexible versions use unsigned-varint lengths plus one (0 = null) and end
every struct with a tagged-field section ``count {tag size bytes[size]}``. The request header's
client id is a legacy nullable string in both header versions.

Per class, the walker is Python source generated once from the schema and compiled, so the
hot path (Produce, Fetch) costs a few microseconds: one call per struct, consecutive
fixed-size fields folded into one addition.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from strom.protocol.kio_fields import field_shape
from strom.protocol.varint import VarintError, read_uvarint

__all__ = ["MalformedRequestError", "check_body", "check_header"]

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I8 = struct.Struct(">b").unpack_from

_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
_LENGTH_PREFIXED = {"string", "bytes", "records"}


class MalformedRequestError(Exception):
    """A declared length exceeds the bytes that remain, or a length is negative."""


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varint at ``pos`` (at most 5 bytes: :func:`strom.protocol.varint.read_uvarint`)."""
    try:
        return read_uvarint(buf, pos)
    except VarintError as exc:
        raise MalformedRequestError(str(exc)) from None


def _skip_tagged(buf: bytes, pos: int, end: int, known: dict[int, Any], nulls: list[str]) -> int:
    """Walk a tagged-field section; known tags are walked by their own walker, bounded."""
    count, pos = _uvarint(buf, pos)
    if count > end - pos:
        raise MalformedRequestError(f"{count} tagged fields in {end - pos} bytes")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        stop = pos + size
        if stop > end:
            raise MalformedRequestError(f"tagged field of {size} bytes past the end")
        walk = known.get(tag)
        if walk is not None and walk(buf, pos, stop, nulls) > stop:
            raise MalformedRequestError(f"tagged field {tag} overruns its {size} bytes")
        pos = stop
    return pos


class _Compiler:
    """Generates one walker function per kio class (Kafka's structs are never recursive)."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {
            "_uvarint": _uvarint,
            "_skip_tagged": _skip_tagged,
            "_I8": _I8,
            "_I16": _I16,
            "_I32": _I32,
            "Malformed": MalformedRequestError,
        }
        self.names: dict[Any, str] = {}

    def walker(self, cls: Any) -> Callable[[bytes, int, int, list[str]], int]:
        return self.namespace[self._compile(cls)]  # type: ignore[no-any-return]

    def _compile(self, cls: Any) -> str:
        """A function walking one ``cls``: ``(buf, pos, end, nulls) -> pos after it``."""
        name = self.names.get(cls)
        if name is not None:
            return name
        name = f"_walk_{len(self.names)}"
        self.names[cls] = name
        lines = [f"def {name}(buf, pos, end, nulls):", *self._struct_lines(cls, "    ")]
        lines.append("    if pos > end:")
        lines.append(f"        raise Malformed('{cls.__name__} runs past the end')")
        lines.append("    return pos")
        exec("\n".join(lines), self.namespace)  # noqa: S102 - source generated from kio schemas
        return name

    def _struct_lines(self, cls: Any, ind: str) -> list[str]:
        """Statements walking one ``cls`` in place, nested structs inlined (no calls).

        Positions only grow and every length is checked against ``end - pos``, so a fixed-size
        field that overruns is caught by the next check or the caller's final one."""
        flexible = bool(cls.__flexible__)
        lines: list[str] = []
        fixed = 0
        tagged: dict[int, str] = {}
        for f in fields(cls):
            tag = f.metadata.get("tag")
            if tag is not None:
                tagged[int(tag)] = self._field_walker(cls, f, flexible)
                continue
            size = self._fixed_size(f)
            if size is not None:
                fixed += size
                continue
            if fixed:
                lines.append(f"{ind}pos += {fixed}")
                fixed = 0
            lines.extend(self._field_lines(cls, f, flexible, ind))
        if fixed:
            lines.append(f"{ind}pos += {fixed}")
        if flexible:
            known = f"_tags_{len(self.namespace)}"
            self.namespace[known] = {t: self.namespace[w] for t, w in tagged.items()}
            lines.append(f"{ind}if buf[pos]:")  # almost always no tagged fields: one 0 byte
            lines.append(f"{ind}    pos = _skip_tagged(buf, pos, end, {known}, nulls)")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    pos += 1")
        return lines or [f"{ind}pass"]

    @staticmethod
    def _fixed_size(f: Any) -> int | None:
        shape = field_shape(f)
        if shape.array or shape.entity is not None:
            return None
        return _FIXED.get(f.metadata.get("kafka_type", ""))

    def _field_walker(self, cls: Any, f: Any, flexible: bool) -> str:
        """A standalone walker for one (tagged) field."""
        name = f"_walk_{len(self.names)}_{f.name}"
        self.names[(cls, f.name)] = name
        body = self._field_lines(cls, f, flexible, "    ")
        source = "\n".join([f"def {name}(buf, pos, end, nulls):", *body, "    return pos"])
        exec(source, self.namespace)  # noqa: S102 - source generated from kio schemas
        return name

    def _field_lines(self, cls: Any, f: Any, flexible: bool, ind: str) -> list[str]:
        array, entity, nullable = field_shape(f)
        where = f"{cls.__name__}.{f.name}"
        null = [] if nullable else [f"{ind}    nulls.append('{where}')"]
        if array:
            lines = self._count_lines(flexible, ind)
            lines.append(f"{ind}if n < 0:")
            lines.extend(null or [f"{ind}    pass"])
            lines.append(f"{ind}else:")
            if entity is not None:
                lines.append(f"{ind}    if n > end - pos:")
                lines.append(f"{ind}        raise Malformed('{where}: ' + str(n) + ' items')")
                lines.append(f"{ind}    for _ in range(n):")
                lines.extend(self._struct_lines(entity, ind + "        "))
                return lines
            kafka_type = f.metadata.get("kafka_type", "")
            size = _FIXED.get(kafka_type)
            if size is not None:
                lines.append(f"{ind}    if n * {size} > end - pos:")
                lines.append(f"{ind}        raise Malformed('{where}: ' + str(n) + ' items')")
                lines.append(f"{ind}    pos += n * {size}")
                return lines
            lines.append(f"{ind}    if n > end - pos:")
            lines.append(f"{ind}        raise Malformed('{where}: ' + str(n) + ' items')")
            lines.append(f"{ind}    for _ in range(n):")
            item_null = [f"{ind}            nulls.append('{where}[]')"]  # items are never null
            lines.extend(self._blob_lines(kafka_type, flexible, item_null, where, ind + "        "))
            return lines
        if entity is not None:
            if not nullable:
                return self._struct_lines(entity, ind)
            # A nullable struct is preceded by an int8: -1 null, 1 present.
            return [
                f"{ind}(m,) = _I8(buf, pos)",
                f"{ind}pos += 1",
                f"{ind}if m >= 0:",
                *self._struct_lines(entity, ind + "    "),
            ]
        kafka_type = f.metadata.get("kafka_type", "")
        size = _FIXED.get(kafka_type)
        if size is not None:
            return [f"{ind}pos += {size}"]
        return self._blob_lines(kafka_type, flexible, null, where, ind)

    @staticmethod
    def _varint_lines(ind: str) -> list[str]:
        """``n`` = a compact length (unsigned varint minus one); one-byte varints inline."""
        return [
            f"{ind}n = buf[pos]",
            f"{ind}if n < 128:",
            f"{ind}    pos += 1",
            f"{ind}elif buf[pos + 1] < 128:",  # two bytes: lengths up to 16 KiB
            f"{ind}    n = (n & 127) | (buf[pos + 1] << 7)",
            f"{ind}    pos += 2",
            f"{ind}else:",
            f"{ind}    n, pos = _uvarint(buf, pos)",
            f"{ind}n -= 1",
        ]

    @staticmethod
    def _count_lines(flexible: bool, ind: str) -> list[str]:
        """Set ``n`` to an array count (-1 for null) and advance ``pos`` past it."""
        if flexible:
            return _Compiler._varint_lines(ind)
        return [
            f"{ind}(n,) = _I32(buf, pos)",
            f"{ind}pos += 4",
            f"{ind}if n < -1:",
            f"{ind}    raise Malformed('negative array length ' + str(n))",
        ]

    @staticmethod
    def _blob_lines(
        kafka_type: str, flexible: bool, null: list[str], where: str, ind: str
    ) -> list[str]:
        """A length-prefixed string / bytes / records value."""
        if kafka_type not in _LENGTH_PREFIXED:
            raise TypeError(f"{where}: unknown kafka type {kafka_type!r}")
        if flexible:
            lines = _Compiler._varint_lines(ind)
        elif kafka_type == "string":
            lines = [f"{ind}(n,) = _I16(buf, pos)", f"{ind}pos += 2"]
        else:
            lines = [f"{ind}(n,) = _I32(buf, pos)", f"{ind}pos += 4"]
        negative = [] if flexible else [  # a varint minus one is never below -1
            f"{ind}    if n < -1:",
            f"{ind}        raise Malformed('negative length ' + str(n))",
        ]
        lines += [
            f"{ind}if n < 0:",
            *negative,
            *(null or [f"{ind}    pass"]),
            f"{ind}elif n > end - pos:",
            f"{ind}    raise Malformed('{where}: ' + str(n) + ' bytes past the end')",
            f"{ind}else:",
            f"{ind}    pos += n",
        ]
        return lines


_COMPILER = _Compiler()
_NO_TAGS: dict[int, Any] = {}
_WALKERS: dict[Any, Callable[[bytes, int, int, list[str]], int]] = {}


def check_header(frame: bytes, flexible: bool) -> int:
    """Bound the request header; return where the body starts.

    Header v1: ``api_key int16, api_version int16, correlation_id int32, client_id
    nullable int16 string``; v2 adds a tagged-field section (no tags are known).
    """
    try:
        (n,) = _I16(frame, 8)
        pos = 10 + n if n > 0 else 10
        if n < -1 or pos > len(frame):
            raise MalformedRequestError(f"client id of {n} bytes")
        if flexible:
            if frame[pos]:  # tagged fields in a header: rare
                pos = _skip_tagged(frame, pos, len(frame), _NO_TAGS, [])
            else:
                pos += 1
    except (IndexError, struct.error):
        raise MalformedRequestError("request header runs past the end") from None
    return pos


def check_body(cls: Any, frame: bytes, pos: int) -> list[str]:
    """Walk the body of ``cls`` starting at ``pos``.

    Raises :class:`MalformedRequestError` if any declared length exceeds the frame; returns the
    fields (``Class.field``) that were null although the schema does not allow it.
    """
    walk = _WALKERS.get(cls)
    if walk is None:
        walk = _WALKERS[cls] = _COMPILER.walker(cls)
    nulls: list[str] = []
    try:
        walk(frame, pos, len(frame), nulls)
    except (IndexError, struct.error):
        raise MalformedRequestError(f"{cls.__name__} runs past the end") from None
    return nulls
