"""One client connection's protocol, without I/O (h11's shape): bytes in, requests out;
responses in, bytes out.

:class:`ConnectionCore` frames what arrives (a declared length beyond
``socket.request.max.bytes`` is :class:`~strom.protocol.framing.FrameTooLargeError`: the
connection closes), and decodes each frame into one event:

- :class:`Request`: a request of a served API version (header, handler, decoded body), for
  its handler. A Produce request is always a :class:`~strom.protocol.produce_request.ProduceRequest`:
  read without ``kio`` when it has one topic with one partition
  (:class:`~strom.protocol.produce_fast.SingleProduceReader`), else decoded by ``kio`` and
  converted, so both reach the one Produce handler, the same way;
- :class:`Invalid`: well-formed but with a null the schema forbids: answered INVALID_REQUEST
  (:meth:`ConnectionCore.error_answer`), the connection stays open;
- ``bytes``: an answer ready without a handler (ApiVersions at a version not served: v0 format,
  UNSUPPORTED_VERSION, the full API list, so the client can retry);
- :class:`CloseConnection` is raised for what must close the connection: a malformed frame, an
  API or version not served (decided from the 8-byte prefix, before a byte of the body is
  decoded), a failed acks=0 Produce (it gets no answer: Kafka closes the connection so the
  producer learns of it).

:meth:`ConnectionCore.encode` turns a handler's response into the response frame: ``kio``
entities, and the plain tuples of :mod:`strom.protocol.hot_path` (Produce answers through the
connection's response templates, Fetch answers as parts: records read into memory not
copied again, file regions for ``sendfile``; cached Metadata bodies). Responses are in request order because the transport
(:mod:`strom.broker.server`) hands requests to their handlers one at a time, as Kafka mutes a
channel while a request is in flight.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.static.primitive import i16

from strom.broker import dispatch, zero_copy
from strom.broker.dispatch import HandlerSpec
from strom.protocol import hot_path
from strom.protocol.error_response import error_response
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import FrameDecoder
from strom.protocol.messages import (
    API_VERSIONS_KEY,
    InvalidRequestError,
    ProtocolError,
    RequestHeader,
    decode_request,
    encode_response,
    peek_header,
    response_class,
)
from strom.protocol.produce_fast import (
    VERSIONS,
    OnePartition,
    ResponseTemplates,
    SingleProduceReader,
)
from strom.protocol.produce_request import ProduceRequest, from_kio
from strom.protocol.produce_request import error_response as produce_error_response

PRODUCE_KEY = 0
_new = tuple.__new__  # a NamedTuple from a plain tuple (per request: no keyword handling)


class CloseConnection(Exception):
    """The connection must be closed (after the answers to the requests before this one)."""


class Request(NamedTuple):
    header: RequestHeader
    spec: HandlerSpec
    body: Any  # the kio request entity, or a ProduceRequest


class Invalid(NamedTuple):
    header: RequestHeader
    spec: HandlerSpec
    body: Any  # what kio decoded
    message: str


class ConnectionCore:
    __slots__ = ("frames", "produce", "produce_spec", "templates")

    def __init__(self, max_request_bytes: int) -> None:
        self.frames = FrameDecoder(max_request_bytes)
        self.produce = SingleProduceReader()  # remembers the last Produce request's layout
        spec = dispatch.lookup(PRODUCE_KEY)
        #: the Produce handler, when it serves every version the single-partition reader reads
        self.produce_spec = spec if spec is not None and all(map(spec.serves, VERSIONS)) else None
        self.templates = ResponseTemplates()

    def receive(self, data: bytes) -> list[bytes]:
        """The complete frames ``data`` ends (FrameTooLargeError: close the connection)."""
        return self.frames.feed(data)

    def decode(self, frame: bytes) -> Request | Invalid | bytes:
        """The event of one frame (module doc); raises :class:`CloseConnection`."""
        if frame.startswith(b"\0\0") and self.produce_spec is not None:
            single = self.produce.read(frame)  # Produce: one topic, one partition, without kio
            if single is not None:
                return _new(Request, (single[0], self.produce_spec, single[1]))
        try:
            peeked = peek_header(frame)
        except ProtocolError as exc:
            raise CloseConnection(str(exc)) from None
        api_key, api_version, correlation_id = peeked
        spec = dispatch.lookup(api_key)
        if spec is None or not spec.serves(api_version):
            if api_key == API_VERSIONS_KEY:
                return unsupported_api_versions_response(correlation_id)
            raise CloseConnection(f"api key {api_key} v{api_version} is not served")
        try:
            header, request = decode_request(frame, peeked)
        except InvalidRequestError as exc:
            return Invalid(exc.header, spec, exc.request, str(exc))
        except ProtocolError as exc:
            raise CloseConnection(str(exc)) from None
        if api_key == PRODUCE_KEY:
            request = from_kio(request)
        return Request(header, spec, request)

    def encode(self, header: RequestHeader,
               response: Any) -> bytes | list[bytes] | zero_copy.SplicedResponse:  # fmt: skip
        """The response frame (size prefix included) of ``response`` to ``header``'s request:
        bytes, or a list of bytes to write in order for a Fetch answer holding large records
        (not copied into one buffer); a Fetch answer whose records stay in the files as a
        :class:`SplicedResponse` whose ``parts`` are set."""
        if type(response) is OnePartition:  # first: nearly every request
            return self.templates.one(header[1], header[2], response)
        if type(response) is hot_path.ProduceResponse:
            return self.templates.frame(header[1], header[2], response)
        if isinstance(response, hot_path.EncodedBody):
            return hot_path.body_frame(header.correlation_id, response)
        if isinstance(response, hot_path.FetchResponse):
            parts = hot_path.fetch_frame(header.api_version, header.correlation_id, response)
            # large records stay parts of their own (written as they are, not copied)
            return parts[0] if len(parts) == 1 else parts
        if isinstance(response, zero_copy.SplicedResponse):
            try:
                response.parts = hot_path.fetch_frame(header.api_version, header.correlation_id,
                                                      response.response)  # fmt: skip
            except BaseException:
                response.close()
                raise
            return response
        return encode_response(header.api_key, header.api_version, header.correlation_id,
                               response)  # fmt: skip

    def error_answer(self, header: RequestHeader, request: Any, code: ErrorCode,
                     message: str) -> bytes:  # fmt: skip
        """Answer ``request`` with ``code`` (Kafka's ``getErrorResponse``). A Produce with
        acks=0 expects no answer: as Kafka does, the connection is closed
        (:class:`CloseConnection`) so the producer learns of the failure."""
        if header.api_key == PRODUCE_KEY and getattr(request, "acks", None) == 0:
            raise CloseConnection(f"acks=0 produce failed: {message}")
        if isinstance(request, ProduceRequest):
            return self.templates.frame(header.api_version, header.correlation_id,
                                        produce_error_response(request, code, message))  # fmt: skip
        cls = response_class(header.api_key, header.api_version)
        return encode_response(header.api_key, header.api_version, header.correlation_id,
                               error_response(cls, request, code, message))  # fmt: skip


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """ApiVersions v0 format, UNSUPPORTED_VERSION, with the full API list (so the client can
    retry with a version we serve)."""
    response = ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersion(api_key=i16(s.api_key), min_version=i16(s.advertise_min),
                       max_version=i16(s.advertised_max))
            for s in dispatch.supported_apis()
        ),
    )  # fmt: skip
    return encode_response(API_VERSIONS_KEY, 0, correlation_id, response)
