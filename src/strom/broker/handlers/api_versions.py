"""ApiVersions (key 18): the versions this broker serves, derived from the handler registry.

Default-valued tagged fields (supported features …) are left out of the v3+ reply, which
``kio`` does for fields at their defaults: librdkafka 2.0 (Debian's kcat) cannot parse them.
An unsupported ApiVersions version is answered by the server in the v0 format.
"""

from __future__ import annotations

from typing import Any

from strom.broker import dispatch
from strom.broker.context import RequestContext

API_KEY = 18


@dispatch.handler(API_KEY, 0, 4)
async def handle(ctx: RequestContext, request: Any) -> Any:
    return ctx.respond(
        error_code=0,
        api_keys=tuple(
            ctx.make(
                "ApiVersion",
                api_key=spec.api_key,
                min_version=spec.advertise_min,
                max_version=spec.advertised_max,
            )
            for spec in dispatch.supported_apis()
        ),
        throttle_time=0,
    )
