"""SaslHandshake (key 17, v0-1): the client names its SASL mechanism.

On a SASL listener the connection's :class:`~strom.security.sasl.Authenticator` answers it
(the enabled mechanisms; UNSUPPORTED_SASL_MECHANISM closes the connection after the answer;
after a v0 handshake the next frames are raw SASL tokens; once authenticated, a handshake
starts a KIP-368 re-authentication). On any other listener it is ILLEGAL_SASL_STATE, as
Kafka's ``KafkaApis`` answers it.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 17


@dispatch.handler(API_KEY, 0, 1)
def handle(ctx: RequestContext, request: Any) -> Any:
    auth = ctx.client.sasl
    if auth is None:
        return ctx.respond(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    code, mechanisms = auth.handshake(request.mechanism, ctx.api_version)
    return ctx.respond(error_code=code, mechanisms=tuple(mechanisms))
