"""Kafka protocol messages through ``kio``: decode request frames, encode response frames.

Sans-IO: bytes in, entities out, and back. Every API key and version has its own generated
``kio`` classes (a Fetch v12 response is a different class from a Fetch v11 response, nested
classes included), so handlers build responses with :func:`build`, which keeps only the fields
the chosen version has and coerces plain ints into the wrapper types ``kio`` writes
(``ErrorCode``, millisecond ``timedelta``). A handler is then written once for all versions;
a field name that no version of the message has is a bug in the caller and refused
(:class:`UnknownFieldError`), so a typo cannot silently drop a field.

Frame layout: ``int32 size | request header | body``. The request header is v1 (legacy
strings) for non-flexible versions and v2 (tagged fields) for flexible ones; the response
header is v0 for non-flexible versions and v1 for flexible ones, except ApiVersions, whose
response header is always v0 so a client can read it before versions are negotiated.
"""

from __future__ import annotations

import datetime
import importlib
import io
import struct
from collections.abc import Callable
from dataclasses import MISSING, fields
from functools import cache
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32

from strom.protocol import interbroker
from strom.protocol.hot_path import response_header
from strom.protocol.request_check import MalformedRequestError, check_body, check_header

API_VERSIONS_KEY = 18
_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_SIZE = struct.Struct(">i")

E = TypeVar("E")
T = TypeVar("T")


class ProtocolError(Exception):
    """The peer sent something that is not a valid request; the connection is closed."""


class InvalidRequestError(ProtocolError):
    """Well-formed, but null where the schema forbids it: the request is answered with
    INVALID_REQUEST (the connection stays open). Carries what was decoded."""

    def __init__(self, header: RequestHeader, request: Any, null_fields: list[str]) -> None:
        super().__init__(f"null in non-nullable field(s) {', '.join(null_fields[:3])}")
        self.header = header
        self.request = request
        self.null_fields = null_fields


class UnsupportedVersionError(ProtocolError):
    """A known API key at a version this build cannot decode."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {api_version} is not supported")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class UnknownFieldError(TypeError):
    """:func:`build` was given a field name that no version of the message has: a bug in the
    caller (a typo), never something a peer sent."""


class RequestHeader(NamedTuple):
    """What every request carries, whatever its header version (a tuple: made per request)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    return interbroker.entity(api_key, api_version, False) or load_request_schema(
        api_key, api_version
    )


@cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    return interbroker.entity(api_key, api_version, True) or load_response_schema(
        api_key, api_version
    )


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    """The module holding a response's nested classes (``mod.PartitionData`` …)."""
    return interbroker.lookup(api_key, api_version, True) or load_payload_module(
        api_key, api_version, EntityType.response
    )


@cache
def request_module(api_key: int, api_version: int) -> ModuleType:
    """The module holding a request's nested classes."""
    return interbroker.lookup(api_key, api_version, False) or load_payload_module(
        api_key, api_version, EntityType.request
    )


def _per_class(fn: Callable[[Any], T]) -> Callable[[Any], T]:
    """Memoise ``fn`` per class (``functools.cache`` trips mypy on kio's class types)."""
    memo: dict[Any, T] = {}

    def wrapper(cls: Any) -> T:
        try:
            return memo[cls]
        except KeyError:
            memo[cls] = result = fn(cls)
            return result

    return wrapper


@_per_class
def _reader(cls: Any) -> Any:
    return entity_reader(cls)


@_per_class
def _writer(cls: Any) -> Any:
    return entity_writer(cls)


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id) from the first 8 bytes of a request body."""
    if len(frame) < _PREFIX.size:
        raise ProtocolError("request shorter than its header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame, 0)
    return int(api_key), int(api_version), int(correlation_id)


def decode_request(frame: bytes,
                   peeked: tuple[int, int, int] | None = None) -> tuple[RequestHeader, Any]:  # fmt: skip
    """Decode one request (the bytes after the size prefix).

    Raises :class:`UnsupportedVersionError` for a version ``kio`` has no schema for,
    :class:`InvalidRequestError` for a null the schema forbids and :class:`ProtocolError` for
    anything malformed, never anything else. Every declared length is bounded by
    :mod:`strom.protocol.request_check` before ``kio``'s native reader sees the bytes (a
    claimed length beyond the frame would abort the process there). ``peeked`` is what
    :func:`peek_header` returned for this frame, when the caller has it already.
    """
    api_key, api_version, correlation_id = peeked if peeked is not None else peek_header(frame)
    try:
        cls = request_class(api_key, api_version)
    except Exception:
        raise UnsupportedVersionError(api_key, api_version, correlation_id) from None
    flexible = bool(cls.__flexible__)
    try:
        null_fields = check_body(cls, frame, check_header(frame, flexible))
    except MalformedRequestError as exc:
        raise ProtocolError(f"malformed request (api key {api_key} v{api_version}): {exc}") from None
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    try:
        header, used = _reader(header_cls)(frame, 0)
    except Exception as exc:  # kio raises several types for truncated or garbled input
        raise ProtocolError(f"malformed request header (api key {api_key}): {exc}") from None
    decoded = RequestHeader(api_key, api_version, correlation_id, header.client_id)
    try:
        request, _ = _reader(cls)(frame, used)
    except Exception as exc:
        if null_fields:  # kio refuses some nulls itself (a null non-nullable string)
            raise InvalidRequestError(decoded, None, null_fields) from None
        raise ProtocolError(f"malformed request (api key {api_key}): {exc}") from None
    # Bytes after the body are ignored, as Kafka's own parser does: librdkafka 2.x sends
    # three extra bytes after a Metadata v12 "all topics" request, and refusing them would lock
    # confluent-kafka's list_topics() out.
    if null_fields:
        raise InvalidRequestError(decoded, request, null_fields)
    return decoded, request


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """The complete response frame, size prefix included."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    flexible = bool(type(response).__flexible__)
    # The header is hand-written (hot_path): kio's generic writer costs more than the int32.
    buf.write(response_header(correlation_id, flexible and api_key != API_VERSIONS_KEY))
    _writer(type(response))(buf, response)
    data = buf.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    del data
    return buf.getvalue()


def encode_body(response: Any) -> bytes:
    """A response body without header or size (to cache: see ``hot_path.EncodedBody``)."""
    buf = io.BytesIO()
    _writer(type(response))(buf, response)
    return buf.getvalue()


def encode_request(header: RequestHeader, request: Any) -> bytes:
    """A request frame (size prefix included): for tests and broker-to-broker traffic."""
    cls = type(request)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_cls)(
        buf,
        header_cls(
            request_api_key=i16(header.api_key),
            request_api_version=i16(header.api_version),
            correlation_id=i32(header.correlation_id),
            client_id=header.client_id,
        ),
    )
    _writer(cls)(buf, request)
    data = buf.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    del data
    return buf.getvalue()


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, response) from a response frame without its size prefix."""
    cls = response_class(api_key, api_version)
    header_cls = (
        ResponseHeaderV1 if cls.__flexible__ and api_key != API_VERSIONS_KEY else ResponseHeaderV0
    )
    header, used = _reader(header_cls)(frame, 0)
    response, _ = _reader(cls)(frame, used)
    return int(header.correlation_id), response


def _coerce_error(value: Any) -> Any:
    return value if isinstance(value, ErrorCode) else ErrorCode(int(value))


def _coerce_timedelta(value: Any) -> Any:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def _coerce_datetime(value: Any) -> Any:
    if value is None or isinstance(value, datetime.datetime):
        return value
    if int(value) < 0:  # Kafka's "no timestamp"
        return None
    return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)


_COERCERS = {
    "error_code": _coerce_error,
    "timedelta_i32": _coerce_timedelta,
    "timedelta_i64": _coerce_timedelta,
    "datetime_i64": _coerce_datetime,
}


@_per_class
def _field_plan(cls: Any) -> dict[str, Any]:
    """name -> coercer (or None) for every field of ``cls``."""
    plan: dict[str, Any] = {}
    for f in fields(cls):
        plan[f.name] = _COERCERS.get(f.metadata.get("kafka_type", ""))
    return plan


@_per_class
def _required_fields(cls: Any) -> frozenset[str]:
    return frozenset(
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    )


@cache
def _versioned_modules() -> dict[str, tuple[str, Any]]:
    """Every kio schema module by name: ``kio.schema.fetch.v12.response`` -> ("fetch",
    response), from kio's public schema index."""
    return {
        path.split(":", 1)[0]: (name, entity_type)
        for name, versions in schema_name_map.items()
        for entities in versions.values()
        for entity_type, path in entities.items()
    }


@_per_class
def _names_of_any_version(cls: Any) -> frozenset[str]:
    """The field names of ``cls`` in every version of its message: kio generates one module
    per version, each with a class of the same name for the same struct (request or response
    body, or a nested struct), so a name is legitimate if any of them has it. Classes outside
    kio's versioned schemas (strom's vendored inter-broker ones: one version) give their own.
    Imports the message's other version modules the first time a field is dropped."""
    names = {f.name for f in fields(cls)}
    found = _versioned_modules().get(cls.__module__)
    if found is None:
        return frozenset(names)
    schema, entity_type = found
    for entities in schema_name_map[schema].values():
        path = entities.get(entity_type)
        if path is None:
            continue
        other = getattr(importlib.import_module(path.split(":", 1)[0]), cls.__qualname__, None)
        if other is not None:
            names.update(f.name for f in fields(other))
    return frozenset(names)


_DROP = object()  # in a build plan: a field only other versions of the message have


@_per_class
def _build_plan(cls: Any) -> dict[str, Any]:
    """:func:`_field_plan`, plus (once a name was missing from it) ``_DROP`` for the names only
    other versions have: :func:`build` then answers every name with one lookup."""
    return dict(_field_plan(cls))


def _drops_of(cls: Any, name: str) -> dict[str, Any]:
    """``name`` is not a field of ``cls``: add the other versions' names to its build plan,
    or raise :class:`UnknownFieldError` when no version has ``name``."""
    names = _names_of_any_version(cls)
    if name not in names:
        raise UnknownFieldError(
            f"{cls.__module__}.{cls.__qualname__}: no version of it has a field {name!r}"
        )
    plan = _build_plan(cls)
    for other in names:
        plan.setdefault(other, _DROP)
    return plan


def build(cls: type[E], **values: Any) -> E:
    """Construct ``cls`` from the values it has fields for; the rest are dropped.

    Lets one handler serve every version: pass every field any version has, and each version's
    class takes its own. Plain ints become ``ErrorCode`` / ``timedelta`` where ``kio`` needs
    them. Bugs in the caller: a field the version requires but the caller did not pass
    (TypeError), a field name that no version of the message has (:class:`UnknownFieldError`).
    One dict lookup per name (the plan is cached per class): on hot paths.
    """
    plan = _build_plan(cls)
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        try:
            coerce = plan[name]
        except KeyError:
            plan = _drops_of(cls, name)
            coerce = plan[name]
        if coerce is None:
            kwargs[name] = value
        elif coerce is not _DROP:
            kwargs[name] = coerce(value)
    missing = _required_fields(cls) - kwargs.keys()
    if missing:
        raise TypeError(f"{cls.__module__}.{cls.__qualname__} needs {sorted(missing)}")
    return cls(**kwargs)


def has_field(cls: type[Any], name: str) -> bool:
    return name in _field_plan(cls)
