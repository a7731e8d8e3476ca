"""The CLI's pure parsing: produce input templates, consume offsets and output templates,
broker addresses, record sizes. No broker needed."""

from __future__ import annotations

import io

import pytest

from strom.admin.addresses import Address, parse_addresses
from strom.admin.errors import AdminError
from strom.admin.timestamps import iso_ms
from strom.cli.consume import parse_offset
from strom.cli.consume_format import compile_template, encode
from strom.cli.produce import batch_size
from strom.cli.produce_input import parse_template, read_records


def records(template: str, data: bytes) -> list[tuple[int, dict[str, bytes], str | None]]:
    return [(r.line, r.fields, r.error)
            for r in read_records(io.BytesIO(data), parse_template(template))]  # fmt: skip


def test_default_template_is_one_record_a_line() -> None:
    assert records("%v\\n", b"a\nb\r\n\nlast") == [
        (1, {"value": b"a"}, None),
        (2, {"value": b"b"}, None),
        (3, {"value": b""}, None),
        (4, {"value": b"last"}, None),
    ]


def test_key_value_template_names_the_line_of_a_malformed_record() -> None:
    assert records("%k:%v\\n", b"k1:v1\nno key here\nk3:v:3\n") == [
        (1, {"key": b"k1", "value": b"v1"}, None),
        (2, {}, "expected ':' after the key"),
        (3, {"key": b"k3", "value": b"v:3"}, None),
    ]


def test_multi_line_records_count_lines_and_headers_partition_parse() -> None:
    assert records("%k\\n%v\\n", b"k\nv\nk2\nv2\n") == [
        (1, {"key": b"k", "value": b"v"}, None),
        (3, {"key": b"k2", "value": b"v2"}, None),
    ]
    assert records("%p %H %v", b"1 a=b,c=d hello world\n") == [
        (1, {"partition": b"1", "headers": b"a=b,c=d", "value": b"hello world"}, None)
    ]


@pytest.mark.parametrize("template", ["%v\\n", "%v;"])  # one a line; any delimiter
def test_reading_is_incremental(template: str) -> None:
    """A record is yielded before the input ends (``tail -f | strom produce``): the source
    hands out what has "arrived" and fails the test if read further."""
    sep = b"\n" if template.endswith("n") else b";"

    class Trickle(io.RawIOBase):
        def __init__(self) -> None:
            self.chunks = [b"first" + sep + b"sec", b"ond" + sep]

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
            if not self.chunks:
                raise AssertionError("read past what the test allowed")
            chunk = self.chunks.pop(0)
            buffer[: len(chunk)] = chunk
            return len(chunk)

    raw = Trickle()
    reader = read_records(io.BufferedReader(raw), parse_template(template))
    assert next(reader).fields == {"value": b"first"}
    assert raw.chunks == [b"ond" + sep]  # the second chunk was not needed yet
    assert next(reader).fields == {"value": b"second"}


@pytest.mark.parametrize(
    ("template", "fragment"),
    [("%k%v", "separator"), ("%k:%q", "unknown field %q"), ("%k\\n", "%v"),
     ("%v %v", "twice")],
)  # fmt: skip
def test_bad_input_templates(template: str, fragment: str) -> None:
    with pytest.raises(AdminError, match=fragment):
        parse_template(template)


def test_offsets() -> None:
    assert parse_offset("start") == ("start", 0)
    assert parse_offset("end") == ("end", 0)
    assert parse_offset("42") == ("absolute", 42)
    assert parse_offset("-3") == ("tail", 3)
    assert parse_offset("@1700000000000") == ("time", 1_700_000_000_000)
    assert parse_offset("@2023-11-14T22:13:20Z") == ("time", 1_700_000_000_000)
    with pytest.raises(AdminError, match="invalid --offset"):
        parse_offset("soon")


def test_output_templates_and_encodings() -> None:
    class Msg:
        def topic(self) -> str:
            return "t"

        def partition(self) -> int:
            return 2

        def offset(self) -> int:
            return 7

        def timestamp(self) -> tuple[int, int]:
            return 1, 1_700_000_000_123

        def key(self) -> bytes | None:
            return None

        def value(self) -> bytes:
            return b"\x00\xff"

        def headers(self) -> list[tuple[str, bytes]]:
            return [("h", b"1")]

    render = compile_template("%t/%p/%o %T %d [%k] %K %V %h%%\\n", "hex")
    assert render(Msg()) == b"t/2/7 1700000000123 2023-11-14T22:13:20.123Z [] -1 2 h=31%\n"
    assert encode(b"\x00\xff", "base64") == "AP8="
    assert encode(b"\xff", "utf8") == "\ufffd"
    assert iso_ms(5) == "1970-01-01T00:00:00.005Z"
    with pytest.raises(AdminError, match="unknown field %x"):
        compile_template("%x", None)


def test_broker_addresses() -> None:
    assert parse_addresses("a:1, b:2,PLAINTEXT://c:3,[::1]:4") == [
        Address("a", 1), Address("b", 2), Address("c", 3), Address("::1", 4)
    ]
    for bad in ("localhost", "h:0", "h:x", ":9092", "", "h:70000"):
        with pytest.raises(AdminError, match="malformed broker address"):
            parse_addresses(bad)


def test_batch_size_matches_the_record_batch_format() -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    for key, value, headers in [(None, b"", []), (b"k", b"v" * 300, [("h", b"x" * 200)]),
                                (b"key", b"x" * 20_000, [])]:  # fmt: skip
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=False, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
        )
        builder.append(0, timestamp=0, key=key, value=value, headers=headers)
        assert batch_size(key, value, headers) == len(builder.build())
