"""Answers the server makes when a request cannot be served normally, and their log lines."""

from __future__ import annotations

from strom.broker import dispatch
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import API_VERSIONS_KEY, encode_response


def where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of ``exc``: enough to find a bug, in one line."""
    tb = exc.__traceback__
    if tb is None:
        return "?"
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno} in {code.co_name}"


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """ApiVersions v0 format, UNSUPPORTED_VERSION, with the full API list (so the client can
    retry with a version we serve)."""
    from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
    from kio.static.primitive import i16

    response = ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersion(
                api_key=i16(s.api_key),
                min_version=i16(s.advertise_min),
                max_version=i16(s.max_version),
            )
            for s in dispatch.supported_apis()
        ),
    )
    return encode_response(API_VERSIONS_KEY, 0, correlation_id, response)
