"""SaslAuthenticate (key 36, v0-2): one step of the SASL exchange.

The connection's :class:`~strom.security.sasl.Authenticator` evaluates the token; a failure
is SASL_AUTHENTICATION_FAILED with Kafka's message, and the connection closes after the
answer (delayed by ``connection.failed.authentication.delay.ms``). v1+ answers carry the
session lifetime (KIP-368). Outside a SASL listener: ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 36


@dispatch.handler(API_KEY, 0, 2)
def handle(ctx: RequestContext, request: Any) -> Any:
    auth = ctx.client.sasl
    if auth is None:
        return ctx.respond(error_code=ErrorCode.illegal_sasl_state,
                           error_message="SaslAuthenticate on a listener without SASL",
                           auth_bytes=b"")  # fmt: skip
    result = auth.authenticate(bytes(request.auth_bytes), ctx.api_version)
    if result.error == ErrorCode.none and auth.authenticated:
        ctx.client.principal = auth.principal or ctx.client.principal
    return ctx.respond(error_code=result.error, error_message=result.message,
                       auth_bytes=result.challenge,
                       session_lifetime=result.session_lifetime_ms)  # v1+ (dropped for v0)
