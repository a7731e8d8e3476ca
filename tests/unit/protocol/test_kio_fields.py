"""``field_shape`` reads kio's type hints as kio's serializer does: arrays, nested structs,
nullability, for plain fields, arrays of primitives and arrays of structs."""

from __future__ import annotations

import sys
from dataclasses import fields

from strom.protocol.kio_fields import FieldShape, field_shape
from strom.protocol.messages import request_class


def _shapes(cls: type) -> dict[str, FieldShape]:
    return {f.name: field_shape(f) for f in fields(cls)}


def test_produce_request_shapes() -> None:
    produce = request_class(0, 9)
    mod = sys.modules[produce.__module__]
    top = _shapes(produce)
    assert top["transactional_id"] == FieldShape(False, None, True)
    assert top["acks"] == FieldShape(False, None, False)
    assert top["topic_data"] == FieldShape(True, mod.TopicProduceData, False)
    assert _shapes(mod.TopicProduceData)["partition_data"] == FieldShape(
        True, mod.PartitionProduceData, False
    )
    assert _shapes(mod.PartitionProduceData)["records"] == FieldShape(False, None, True)


def test_nullable_array_of_structs_and_array_of_primitives() -> None:
    metadata = request_class(3, 12)
    mod = sys.modules[metadata.__module__]
    assert _shapes(metadata)["topics"] == FieldShape(True, mod.MetadataRequestTopic, True)
    list_groups = request_class(16, 4)
    assert _shapes(list_groups)["states_filter"] == FieldShape(True, None, False)
