"""Converters: bytes as Kafka Connect writes them, and back."""

from __future__ import annotations

import json

import pytest

from strom.connect.converters import (
    ByteArrayConverter,
    DataError,
    JsonConverter,
    Schema,
    StringConverter,
)


def _json(schemas: bool) -> JsonConverter:
    c = JsonConverter()
    c.configure({"schemas.enable": str(schemas).lower()}, is_key=False)
    return c


def test_json_envelope_round_trip_with_struct_schema() -> None:
    schema = Schema("struct", fields=(("id", Schema("int64")),
                                      ("blob", Schema("bytes", optional=True))))
    c = _json(True)
    data = c.from_connect_data("t", schema, {"id": 7, "blob": b"\x00\xff"})
    assert data is not None
    doc = json.loads(data)
    assert doc == {
        "schema": {"type": "struct", "optional": False, "fields": [
            {"type": "int64", "optional": False, "field": "id"},
            {"type": "bytes", "optional": True, "field": "blob"}]},
        "payload": {"id": 7, "blob": "AP8="},
    }
    assert c.to_connect_data("t", data) == (schema, {"id": 7, "blob": b"\x00\xff"})


def test_json_envelope_required_when_schemas_enabled() -> None:
    with pytest.raises(DataError, match="schemas.enable=false"):
        _json(True).to_connect_data("t", b'{"a": 1}')
    assert _json(False).to_connect_data("t", b'{"a": 1}') == (None, {"a": 1})


def test_json_without_schema_and_tombstones() -> None:
    assert _json(True).from_connect_data("t", None, {"a": 1}) == b'{"schema":null,"payload":{"a":1}}'
    assert _json(False).from_connect_data("t", None, [1, "x"]) == b'[1,"x"]'
    assert _json(False).from_connect_data("t", None, None) is None
    assert _json(False).from_connect_data("t", None, "ü") == '"ü"'.encode()  # no \\u escapes
    assert _json(True).to_connect_data("t", None) == (None, None)
    with pytest.raises(DataError):
        _json(False).to_connect_data("t", b"{not json")


def test_string_and_bytearray() -> None:
    s = StringConverter()
    s.configure({}, is_key=True)
    assert s.from_connect_data("t", None, "zß") == "zß".encode()
    assert s.from_connect_data("t", None, 42) == b"42"
    assert s.to_connect_data("t", "zß".encode())[1] == "zß"
    latin = StringConverter()
    latin.configure({"converter.encoding": "latin-1"}, is_key=False)
    assert latin.from_connect_data("t", None, "ß") == b"\xdf"
    b = ByteArrayConverter()
    assert b.from_connect_data("t", None, b"\x01") == b"\x01"
    assert b.to_connect_data("t", b"\x02")[1] == b"\x02"
    with pytest.raises(DataError, match="not compatible"):
        b.from_connect_data("t", None, "text")


def test_json_converter_caches_schemas_both_ways() -> None:
    from strom.connect.converters import JsonConverter, Schema

    conv = JsonConverter()
    conv.configure({"schemas.cache.size": "2"}, is_key=False)
    schema = Schema("struct", name="p", fields=(("a", Schema("int32")),
                                                ("b", Schema("double", optional=True))))
    first = conv.from_connect_data("t", schema, {"a": 1, "b": None})
    assert first == b'{"schema":{"type":"struct","optional":false,"name":"p","fields":[' \
        b'{"type":"int32","optional":false,"field":"a"},{"type":"double","optional":true,' \
        b'"field":"b"}]},"payload":{"a":1,"b":null}}'
    assert conv.from_connect_data("t", schema, {"a": 2, "b": 0.5}) == \
        first.replace(b'"a":1,"b":null', b'"a":2,"b":0.5')
    s1, v1 = conv.to_connect_data("t", first)
    s2, _ = conv.to_connect_data("t", first)
    assert s1 == schema and s1 is s2 and v1 == {"a": 1, "b": None}  # parsed once
    for n in range(3):  # the cache is bounded by schemas.cache.size
        other = Schema("struct", name=f"o{n}", fields=(("a", Schema("int32")),))
        conv.to_connect_data("t", conv.from_connect_data("t", other, {"a": n}) or b"")
    assert len(conv._parsed) <= 2 and len(conv._rendered) <= 2
