"""Who this broker is: its id, its cluster, where it listens and where its logs are."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from strom.security.listeners import Listeners


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """This broker as others see it. ``cluster_id`` is known once the metadata store is
    (the assembly builds the identity then)."""

    node_id: int
    cluster_id: str
    advertised: tuple[str, int]
    listen: tuple[str, int]
    rack: str | None
    data_dir: Path
    log_dirs: tuple[Path, ...] = field(default=())
    #: every listener (``advertised``/``listen``: the inter-broker one's addresses)
    listeners: Listeners | None = None

    def advertised_on(self, listener: str) -> tuple[str, int]:
        """Where clients of ``listener`` reach this broker (``""``: the peers' address)."""
        if self.listeners is not None and listener:
            for spec in self.listeners.advertised:
                if spec.name == listener:
                    return spec.host, spec.port
        return self.advertised

    @property
    def source_host(self) -> str | None:
        """The listener address outgoing connections are bound to (None for a wildcard
        listener): per-broker firewall rules in network-fault tests tell brokers apart by it."""
        host = self.listen[0]
        return None if host in ("", "0.0.0.0", "::") else host
