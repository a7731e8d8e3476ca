"""Kafka's ZooKeeper-era inter-broker APIs, as kio entity classes.

The controller sends LeaderAndIsr (key 4), StopReplica (5) and UpdateMetadata (6) to brokers;
a broker sends ControlledShutdown (7) to the controller. Kafka 4 removed them with ZooKeeper
mode, and so did kio ≥ 0.6; the classes here are kio 0.1.0's (see each module's header and
``LICENSE.kio``), one version per API: the last one Kafka 3.x defined, which strom sends and
serves. :func:`lookup` is consulted by :mod:`strom.protocol.messages` when kio has no schema.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from strom.protocol.interbroker import (
    controlled_shutdown_v3_request,
    controlled_shutdown_v3_response,
    leader_and_isr_v7_request,
    leader_and_isr_v7_response,
    stop_replica_v4_request,
    stop_replica_v4_response,
    update_metadata_v8_request,
    update_metadata_v8_response,
)

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
CONTROLLED_SHUTDOWN = 7

#: (api key, version) -> (request module, response module)
MODULES: dict[tuple[int, int], tuple[ModuleType, ModuleType]] = {
    (LEADER_AND_ISR, 7): (leader_and_isr_v7_request, leader_and_isr_v7_response),
    (STOP_REPLICA, 4): (stop_replica_v4_request, stop_replica_v4_response),
    (UPDATE_METADATA, 8): (update_metadata_v8_request, update_metadata_v8_response),
    (CONTROLLED_SHUTDOWN, 3): (controlled_shutdown_v3_request, controlled_shutdown_v3_response),
}
_CLASS_NAMES = {
    LEADER_AND_ISR: "LeaderAndIsr",
    STOP_REPLICA: "StopReplica",
    UPDATE_METADATA: "UpdateMetadata",
    CONTROLLED_SHUTDOWN: "ControlledShutdown",
}
#: api key -> the one version strom speaks
VERSIONS = {key: version for key, version in MODULES}


def lookup(api_key: int, api_version: int, response: bool) -> ModuleType | None:
    """The module holding that API version's request (or response) classes, or None."""
    pair = MODULES.get((api_key, api_version))
    return None if pair is None else pair[1 if response else 0]


def entity(api_key: int, api_version: int, response: bool) -> type[Any] | None:
    module = lookup(api_key, api_version, response)
    if module is None:
        return None
    suffix = "Response" if response else "Request"
    return getattr(module, f"{_CLASS_NAMES[api_key]}{suffix}")  # type: ignore[no-any-return]
