"""ListConfigResources (key 74, v0–1; KIP-1142): the resources that have configs.

v0 was ListClientMetricsResources (client-metrics resources only); v1 takes the resource
types wanted (none: every type it supports) and answers name and type of each, as Kafka's
``KafkaApis.handleListConfigResources`` does:

* TOPIC (2): every topic;
* BROKER (4) and BROKER_LOGGER (8): every live broker, by id;
* GROUP (32): groups with group configs (KIP-848's ``consumer.session.timeout.ms`` and the
  like, :mod:`strom.broker.group_configs`);
* CLIENT_METRICS (16): client-metrics subscriptions (KIP-714) — none: strom has no telemetry;
* a type outside those (for v0, anything but CLIENT_METRICS): UNSUPPORTED_VERSION, no list.

The services used (topics, the metadata cache, the config store) are read in :func:`handle`
only.

Authorization: DESCRIBE_CONFIGS on the CLUSTER, else the whole request is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from strom.broker import authz, dispatch, group_configs
from strom.broker.context import RequestContext
from strom.protocol.errors import ErrorCode

API_KEY = 74
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED_V0 = (CLIENT_METRICS,)
SUPPORTED = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


def resources(wanted: tuple[int, ...], topics: list[str], brokers: list[int],
              groups: list[str]) -> list[tuple[str, int]]:  # fmt: skip
    """(name, type) of every resource of the ``wanted`` types, in Kafka's order (groups,
    client metrics, broker loggers, brokers, topics)."""
    out: list[tuple[str, int]] = []
    if GROUP in wanted:
        out += [(g, GROUP) for g in groups]
    if BROKER_LOGGER in wanted:
        out += [(str(b), BROKER_LOGGER) for b in brokers]
    if BROKER in wanted:
        out += [(str(b), BROKER) for b in brokers]
    if TOPIC in wanted:
        out += [(t, TOPIC) for t in topics]
    return out


@dispatch.handler(API_KEY, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> Any:
    authz.require_cluster(ctx, authz.DESCRIBE_CONFIGS)
    supported = SUPPORTED_V0 if ctx.api_version == 0 else SUPPORTED
    wanted = tuple(int(t) for t in getattr(request, "resource_types", ())) or supported
    if any(t not in supported for t in wanted):
        return ctx.respond(throttle_time=0, error_code=ErrorCode.unsupported_version,
                           config_resources=())  # fmt: skip
    topics = sorted(info.name for info in ctx.topics)
    brokers = sorted(ctx.replicas.cache.brokers)
    groups = await group_configs.groups_with_configs(ctx.configs.store) if GROUP in wanted else []
    found = resources(wanted, topics, brokers, groups)
    if ctx.api_version == 0:
        entries = tuple(ctx.make("ConfigResource", resource_name=name) for name, _ in found)
    else:
        entries = tuple(ctx.make("ConfigResource", resource_name=name, resource_type=rtype)
                        for name, rtype in found)  # fmt: skip
    return ctx.respond(throttle_time=0, error_code=ErrorCode.none, config_resources=entries)
