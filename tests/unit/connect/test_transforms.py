"""Single-message transforms and predicates, on the examples of Kafka's and Confluent's docs.

Each runs on a schemaless map (``schemas.enable=false``) and on a struct with its schema (the
JsonConverter envelope after conversion), and through the converter where the bytes matter.
"""

from __future__ import annotations

import pytest

from strom.connect.api import SinkRecord, SourceRecord
from strom.connect.converters import DataError, JsonConverter, Schema
from strom.connect.transforms.base import DATE, TIMESTAMP
from strom.connect.transforms.chain import build_chain, definitions

PERSON = Schema("struct", name="person", fields=(
    ("id", Schema("int64")), ("name", Schema("string", optional=True)),
    ("ssn", Schema("string")), ("age", Schema("int32")),
))
ROW = {"id": 42, "name": "Ada", "ssn": "123-45-6789", "age": 36}


def chain(**props: str):  # type: ignore[no-untyped-def]
    """A chain of one transform aliased ``t`` with ``props`` (``type`` short name)."""
    config = {"transforms": "t"}
    for key, value in props.items():
        config[f"transforms.t.{key.replace('_', '.')}"] = value
    return build_chain(config)


def rec(value: object, schema: Schema | None = None, **kw: object) -> SinkRecord:
    base: dict[str, object] = {"topic": "orders", "partition": 3, "kafka_offset": 17,
                               "timestamp": 1_700_000_000_123}
    base.update(kw)
    return SinkRecord(value=value, value_schema=schema, **base)  # type: ignore[arg-type]


def test_insert_field_static_and_metadata_schemaless() -> None:
    c = chain(type="org.apache.kafka.connect.transforms.InsertField$Value",
              static_field="data_source", static_value="test-file-source",
              topic_field="t", partition_field="p", offset_field="o",
              timestamp_field="ts")
    out = c.apply(rec({"line": "hello"}))
    assert out is not None
    assert out.value == {"line": "hello", "data_source": "test-file-source", "t": "orders",
                         "p": 3, "o": 17, "ts": 1_700_000_000_123}


def test_insert_field_with_schema_and_required_marker() -> None:
    c = chain(type="InsertField$Value", topic_field="topic!", timestamp_field="ts")
    out = c.apply(rec(dict(ROW), PERSON))
    assert out is not None and out.value_schema is not None
    fields = dict(out.value_schema.fields)
    assert fields["topic"] == Schema("string")  # "!" required
    assert fields["ts"] == Schema("int64", optional=True, name=TIMESTAMP)
    assert out.value["topic"] == "orders"
    doc = JsonConverter()
    doc.configure({}, is_key=False)
    encoded = doc.from_connect_data("orders", out.value_schema, out.value)
    assert encoded is not None and b'"field":"topic"' in encoded
    assert c.apply(rec(None)).value is None  # tombstones pass


def test_insert_offset_into_source_record_is_a_data_error() -> None:
    c = chain(type="InsertField$Value", offset_field="o")
    with pytest.raises(DataError):
        c.apply(SourceRecord(topic="t", value={"a": 1}))


def test_replace_field_exclude_include_renames() -> None:
    value = {"c1": 22, "c2": "foo", "c3": False}
    assert chain(type="ReplaceField$Value", exclude="c2").apply(rec(value)).value == \
        {"c1": 22, "c3": False}
    assert chain(type="ReplaceField$Value", include="c1,c3").apply(rec(value)).value == \
        {"c1": 22, "c3": False}
    renamed = chain(type="ReplaceField$Value", renames="c1:foo,c2:bar").apply(rec(value))
    assert renamed.value == {"foo": 22, "bar": "foo", "c3": False}
    out = chain(type="ReplaceField$Value", exclude="ssn", renames="name:full_name").apply(
        rec(dict(ROW), PERSON))
    assert [n for n, _ in out.value_schema.fields] == ["id", "full_name", "age"]
    assert out.value == {"id": 42, "full_name": "Ada", "age": 36}
    assert out.value_schema.name == "person"


def test_extract_field_and_hoist_field() -> None:
    assert chain(type="ExtractField$Value", field="id").apply(
        rec({"id": 42, "cost": 4000})).value == 42
    out = chain(type="ExtractField$Value", field="name").apply(rec(dict(ROW), PERSON))
    assert (out.value_schema, out.value) == (Schema("string", optional=True), "Ada")
    key_rec = SinkRecord(topic="t", value=None, key={"id": 7})
    assert chain(type="ExtractField$Key", field="id").apply(key_rec).key == 7
    assert chain(type="HoistField$Value", field="line").apply(rec(42)).value == {"line": 42}
    hoisted = chain(type="HoistField$Value", field="line").apply(rec("x", Schema("string")))
    assert hoisted.value_schema == Schema("struct", fields=(("line", Schema("string")),))


def test_value_to_key() -> None:
    value = {"userId": 1, "city": "Oslo", "state": "NO", "other": True}
    c = build_chain({"transforms": "k",
                     "transforms.k.type": "org.apache.kafka.connect.transforms.ValueToKey",
                     "transforms.k.fields": "userId,city,state"})
    assert c.apply(rec(value)).key == {"userId": 1, "city": "Oslo", "state": "NO"}
    out = build_chain({"transforms": "k", "transforms.k.type": "ValueToKey",
                       "transforms.k.fields": "id"}).apply(rec(dict(ROW), PERSON))
    assert out.key == {"id": 42}
    assert out.key_schema == Schema("struct", fields=(("id", Schema("int64")),))
    with pytest.raises(DataError, match="Field does not exist: nope"):
        build_chain({"transforms": "k", "transforms.k.type": "ValueToKey",
                     "transforms.k.fields": "nope"}).apply(rec(dict(ROW), PERSON))


def test_mask_field() -> None:
    out = chain(type="MaskField$Value", fields="ssn,age").apply(rec(dict(ROW), PERSON))
    assert out.value == {**ROW, "ssn": "", "age": 0}
    out = chain(type="MaskField$Value", fields="ssn", replacement="***-**-****").apply(
        rec({"ssn": "123", "ok": True}))
    assert out.value == {"ssn": "***-**-****", "ok": True}
    with pytest.raises(DataError):
        chain(type="MaskField$Value", fields="age", replacement="x").apply(
            rec(dict(ROW), PERSON))


def test_cast_fields_and_whole_value() -> None:
    c = chain(type="Cast$Value", spec="id:string,age:float64,ssn:boolean")
    out = c.apply(rec(dict(ROW), PERSON))
    assert out.value == {"id": "42", "name": "Ada", "ssn": False, "age": 36.0}
    assert dict(out.value_schema.fields)["id"] == Schema("string")
    assert dict(out.value_schema.fields)["age"] == Schema("double")  # JsonConverter's name
    assert chain(type="Cast$Value", spec="int8").apply(rec(300)).value == 44  # Java wraps
    assert chain(type="Cast$Value", spec="int32").apply(rec(-3.9)).value == -3
    assert chain(type="Cast$Value", spec="a:int64").apply(rec({"a": "12"})).value == {"a": 12}
    assert chain(type="Cast$Value", spec="a:string").apply(rec({"a": True})).value == \
        {"a": "true"}


def test_timestamp_converter() -> None:
    ts = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z
    c = chain(type="TimestampConverter$Value", field="ts", target_type="string",
              format="yyyy-MM-dd'T'HH:mm:ss.SSS")
    assert c.apply(rec({"ts": ts})).value == {"ts": "2023-11-14T22:13:20.123"}
    back = chain(type="TimestampConverter$Value", field="ts", target_type="unix",
                 format="yyyy-MM-dd'T'HH:mm:ss.SSS").apply(rec({"ts": "2023-11-14T22:13:20.123"}))
    assert back.value == {"ts": ts}
    schema = Schema("struct", fields=(("ts", Schema("int64", name=TIMESTAMP)),))
    out = chain(type="TimestampConverter$Value", field="ts", target_type="Date").apply(
        rec({"ts": ts}, schema))
    assert out.value == {"ts": 19675}
    assert dict(out.value_schema.fields)["ts"] == Schema("int32", name=DATE)
    secs = chain(type="TimestampConverter$Value", target_type="Timestamp",
                 unix_precision="seconds").apply(rec(1_700_000_000, Schema("int64")))
    assert (secs.value, secs.value_schema.name) == (1_700_000_000_000, TIMESTAMP)


def test_regex_router_and_timestamp_router() -> None:
    c = chain(type="org.apache.kafka.connect.transforms.RegexRouter",
              regex=r"([^.]+)\.([^.]+)\.([^.]+)", replacement="$3")
    assert c.apply(rec(1, topic="db.public.orders")).topic == "orders"
    assert c.apply(rec(1, topic="plain")).topic == "plain"  # no whole match: unchanged
    t = chain(type="TimestampRouter", topic_format="foo-${topic}-${timestamp}",
              timestamp_format="YYYYMM")
    assert t.apply(rec(1)).topic == "foo-orders-202311"
    assert chain(type="TimestampRouter").apply(rec(1)).topic == "orders-20231114"
    with pytest.raises(DataError):
        t.apply(rec(1, timestamp=None))


def test_filter_with_predicates_and_negate() -> None:
    config = {"transforms": "Filter", "transforms.Filter.type":
              "org.apache.kafka.connect.transforms.Filter",
              "transforms.Filter.predicate": "IsFoo", "predicates": "IsFoo",
              "predicates.IsFoo.type":
              "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
              "predicates.IsFoo.pattern": "foo.*"}
    c = build_chain(config)
    assert c.apply(rec(1, topic="foobar")) is None
    assert c.apply(rec(1, topic="bar")).value == 1
    negated = build_chain({**config, "transforms.Filter.negate": "true"})
    assert negated.apply(rec(1, topic="foobar")).value == 1
    assert negated.apply(rec(1, topic="bar")) is None
    tomb = build_chain({"transforms": "d", "transforms.d.type": "Filter",
                        "transforms.d.predicate": "t", "predicates": "t",
                        "predicates.t.type": "RecordIsTombstone"})
    assert tomb.apply(rec(None)) is None and tomb.apply(rec("x")).value == "x"
    header = build_chain({"transforms": "d", "transforms.d.type": "Filter",
                          "transforms.d.predicate": "h", "predicates": "h",
                          "predicates.h.type": "HasHeaderKey", "predicates.h.name": "skip"})
    assert header.apply(rec(1, headers=[("skip", b"1")])) is None
    assert header.apply(rec(1, headers=[("keep", b"1")])).value == 1


def test_chain_applies_in_order() -> None:
    c = build_chain({"transforms": "hoist,insert",
                     "transforms.hoist.type": "HoistField$Value", "transforms.hoist.field": "line",
                     "transforms.insert.type": "InsertField$Value",
                     "transforms.insert.static.field": "src",
                     "transforms.insert.static.value": "file"})
    assert c.apply(rec("hello")).value == {"line": "hello", "src": "file"}


def test_validation_errors_name_the_key() -> None:
    defs, errors = definitions({"transforms": "a,b,c", "transforms.a.type": "Nope$Value",
                                "transforms.b.type": "RegexRouter",
                                "transforms.c.type": "TimestampConverter$Value",
                                "transforms.c.target.type": "string",
                                "transforms.b.predicate": "missing"})
    found = {v.name: v.errors for v in defs.validate({
        "transforms": "a,b,c", "transforms.b.type": "RegexRouter",
        "transforms.c.type": "TimestampConverter$Value", "transforms.c.target.type": "string"})}
    assert found["transforms.a.type"] == [
        'Missing required configuration "transforms.a.type" which has no default value.']
    assert found["transforms.b.regex"] == [
        'Missing required configuration "transforms.b.regex" which has no default value.']
    assert "Class Nope$Value could not be found." in errors["transforms.a.type"][0]
    assert "requires format option" in errors["transforms.c.type"][0]
    assert "not listed in 'predicates'" in errors["transforms.b.predicate"][0]
    assert {k.group for k in defs.keys.values()} >= {"Transforms: b", "Transforms: c"}
