"""How a ``kio`` entity's dataclass fields are laid out on the wire, read from their hints.

``kio`` generates one frozen dataclass per message, version and nested struct; each field's
type hint says its shape (``X``, ``X | None``, ``tuple[X, ...]``, a nested dataclass) and its
``metadata`` the Kafka type (``kafka_type``) and tag. ``kio`` reads the hints with a module of
its own that it keeps private (``kio.serial._introspect``); strom's walkers of kio classes
(:mod:`strom.protocol.request_check`, :mod:`strom.protocol.error_response`,
:mod:`strom.testing.samples`) read them here instead, the same way, so they agree with
``kio``'s serializer on what a field is without importing a private module.
"""

from __future__ import annotations

from dataclasses import Field
from types import EllipsisType, NoneType, UnionType
from typing import Any, NamedTuple, Union, get_args, get_origin

__all__ = ["FieldShape", "field_shape"]


class FieldShape(NamedTuple):
    """How a ``kio`` dataclass field is laid out on the wire, read from its type hint.

    ``array``: a ``tuple[X, ...]`` (Kafka array); ``entity``: the nested struct's class for a
    struct or an array of structs, else None; ``nullable``: ``None`` is allowed (the field, or
    an array's items), as ``X | None`` says.
    """

    array: bool
    entity: type[Any] | None
    nullable: bool


def _is_entity(hint: Any) -> bool:
    """A nested struct: a dataclass (kio's entities are; its primitive types are not)."""
    return isinstance(hint, type) and hasattr(hint, "__dataclass_fields__")


def _without_none(hint: Any, where: str) -> Any:
    """``X`` of ``X | None`` (``hint`` itself when it is no ``|`` union)."""
    if get_origin(hint) is not UnionType:
        return hint
    args = [a for a in get_args(hint) if a is not NoneType]
    if len(args) != 1 or len(get_args(hint)) != 2:
        raise TypeError(f"{where}: only a union with None is supported, not {hint}")
    return args[0]


def _tuple_item(hint: Any, where: str) -> Any:
    """``X`` of ``tuple[X, ...]``."""
    args = get_args(hint)
    if len(args) != 2 or not isinstance(args[1], EllipsisType):
        raise TypeError(f"{where}: an array must be tuple[X, ...], not {hint}")
    return args[0]


def field_shape(f: Field[Any]) -> FieldShape:
    """The :class:`FieldShape` of one field of a ``kio`` entity class (or of strom's vendored
    inter-broker ones, generated alike). Its hint is a real type, never a string: ``kio``'s
    generated modules do not postpone annotations."""
    where = f.name
    hint = f.type
    if isinstance(hint, str):
        raise TypeError(f"{where}: postponed annotation {hint!r}")
    inner = _tuple_item(hint, where) if get_origin(hint) is tuple else hint
    nullable = get_origin(inner) in (UnionType, Union) and NoneType in get_args(inner)
    kind = _without_none(hint, where)
    if get_origin(kind) is not tuple:
        return FieldShape(False, kind if _is_entity(kind) else None, nullable)
    item = _tuple_item(kind, where)
    return FieldShape(True, item if _is_entity(item) else None, nullable)
