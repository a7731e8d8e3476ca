"""The broker properties the controller reads (Kafka's names and defaults)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    auto_rebalance: bool = True  # auto.leader.rebalance.enable
    imbalance_interval_s: float = 300.0  # leader.imbalance.check.interval.seconds
    imbalance_percentage: int = 10  # leader.imbalance.per.broker.percentage
    unclean_default: bool = False  # unclean.leader.election.enable
    request_timeout_s: float = 30.0  # controller.socket.timeout.ms

    @classmethod
    def from_config(cls, get: Callable[[str], str | None]) -> ControllerSettings:
        def value(key: str, default: str) -> str:
            found = get(key)
            return default if found is None else found

        return cls(
            value("auto.leader.rebalance.enable", "true").lower() == "true",
            float(value("leader.imbalance.check.interval.seconds", "300")),
            int(value("leader.imbalance.per.broker.percentage", "10")),
            value("unclean.leader.election.enable", "false").lower() == "true",
            int(value("controller.socket.timeout.ms", "30000")) / 1000.0,
        )
