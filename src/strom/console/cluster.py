"""What the console reads from and changes in the cluster, through confluent-kafka.

The console is one more client of the ``strom`` CLI's building blocks: the same connection
settings (:mod:`strom.cli.clients`), topic description (:mod:`strom.cli.topic_describe`),
sizes from DescribeLogDirs to each leader (:mod:`strom.cli.log_dirs`), group lag
(:func:`strom.cli.group.offset_rows`) and offset reset planning (:mod:`strom.cli.group_reset`).
Those take an ``argparse.Namespace``; :meth:`Cluster.args` builds one per call. Every failure is
a :class:`strom.cli.errors.CliError` with one readable sentence, which the web layer shows on
the page.

One AdminClient serves every request (librdkafka clients are thread-safe; Starlette runs the
page handlers in its thread pool); the producer is made on first use.
"""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from strom.cli import clients, group, group_reset, topic_describe
from strom.cli.errors import CliError, timeout, wait_for
from strom.cli.group_admin import committed_offsets, describe_group, end_offsets, state_name
from strom.cli.log_dirs import leader_partition_sizes
from strom.cli.topic import is_internal, validate_topic_name

log = logging.getLogger(__name__)

CLIENT_ID = "strom-console"
#: Reset strategies offered by the console (the names of ``strom group reset-offsets``).
RESET_STRATEGIES = ("earliest", "latest", "offset", "datetime")


class Cluster:
    """The cluster seen through one bootstrap address."""

    def __init__(self, bootstrap: str, client_config: list[str] | None = None) -> None:
        self.bootstrap = bootstrap
        self._client_config = [f"client.id={CLIENT_ID}", *(client_config or [])]
        self._lock = threading.Lock()
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None

    def args(self, **extra: Any) -> argparse.Namespace:
        """The namespace the CLI helpers expect (the console checked the address at start)."""
        return argparse.Namespace(
            bootstrap_server=self.bootstrap,
            client_config=list(self._client_config),
            verbose=0,
            preflight_done=True,
            **extra,
        )

    @property
    def admin(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                self._admin = clients.admin_client(self.args(), check=False)
            return self._admin

    def producer(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = clients.producer(self.args(), {"linger.ms": 0, "acks": "all"})
            return self._producer

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(timeout())
            self._producer = None
            self._admin = None

    # -- cluster ---------------------------------------------------------------------------

    def metadata(self) -> Any:
        return clients.metadata(self.admin, self.args())

    def overview(self) -> dict[str, Any]:
        """Brokers (controller, rack, address), topic and partition health, groups by state."""
        md = self.metadata()
        desc = wait_for(self.admin.describe_cluster(request_timeout=timeout()),
                        "cannot describe the cluster", self.bootstrap)
        controller = desc.controller.id if desc.controller is not None else md.controller_id
        brokers = sorted(
            ({"id": n.id, "host": n.host, "port": n.port, "rack": n.rack,
              "controller": n.id == controller} for n in desc.nodes),
            key=lambda b: b["id"],
        )
        offline, under = [], []
        partitions = 0
        for name, t in sorted(md.topics.items()):
            for pid, part in sorted(t.partitions.items()):
                partitions += 1
                if part.leader < 0:
                    offline.append(f"{name}-{pid}")
                elif len(part.isrs) < len(part.replicas):
                    under.append(f"{name}-{pid}")
        states: dict[str, int] = {}
        for g in self.group_listings():
            states[g["state"]] = states.get(g["state"], 0) + 1
        return {
            "cluster_id": desc.cluster_id or md.cluster_id,
            "controller": controller,
            "brokers": brokers,
            "topics": sum(1 for n in md.topics if not is_internal(n)),
            "internal_topics": sum(1 for n in md.topics if is_internal(n)),
            "partitions": partitions,
            "offline": offline,
            "under_replicated": under,
            "group_states": dict(sorted(states.items())),
        }

    # -- topics ----------------------------------------------------------------------------

    def topic_names(self, internal: bool = True) -> list[str]:
        return sorted(n for n in self.metadata().topics if internal or not is_internal(n))

    def partition_keys(self, names: list[str] | None = None) -> list[tuple[str, int]]:
        topics = self.metadata().topics
        return sorted((n, p) for n, t in topics.items() if t.error is None
                      and (names is None or n in names) for p in t.partitions)

    def end_offsets(self, keys: list[tuple[str, int]], earliest: bool = False) -> dict[
        tuple[str, int], int
    ]:
        spec = OffsetSpec.earliest() if earliest else OffsetSpec.latest()
        return end_offsets(self.admin, keys, self.bootstrap, spec)

    def led(self, keys: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The partitions of ``keys`` that have a leader now (metadata)."""
        topics = self.metadata().topics
        out = []
        for name, index in keys:
            t = topics.get(name)
            part = t.partitions.get(index) if t is not None and t.error is None else None
            if part is not None and part.leader >= 0:
                out.append((name, index))
        return out

    def partition_sizes(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Bytes of each partition's log on its leader (DescribeLogDirs to each leading
        broker). A partition without a leader, or whose leader cannot be asked now, is left
        out: its size shows as unknown, and the page still renders (one broker down must not
        take the topic pages with it)."""
        return leader_partition_sizes(self.metadata(), keys)

    def topics(self) -> list[dict[str, Any]]:
        """One row per topic: partitions, replicas, size (DescribeLogDirs), messages."""
        md = self.metadata()
        keys = self.led(self.partition_keys())  # an offline partition has no offsets to list
        start = self.end_offsets(keys, earliest=True)
        end = self.end_offsets(keys)
        sizes = self.partition_sizes(keys)
        rows = []
        for name, t in sorted(md.topics.items()):
            parts = sorted(t.partitions)
            rows.append({
                "name": name,
                "internal": is_internal(name),
                "partitions": len(parts),
                "replicas": len(t.partitions[parts[0]].replicas) if parts else 0,
                "size": sum(max(sizes.get((name, p), 0), 0) for p in parts),
                "messages": sum(end[(name, p)] - start[(name, p)] for p in parts
                                if (name, p) in end),
                "error": str(t.error) if t.error is not None else None,
            })
        return rows

    def topic(self, name: str) -> dict[str, Any]:
        """Partitions (leader, replicas, ISR, offsets, size) and configs of one topic."""
        args = self.args(names=[name])
        docs = topic_describe.topic_documents(args, self.admin)
        doc = docs[0]
        keys = [(name, p["partition"]) for p in doc["partitions"]]
        online = self.led(keys)  # offline partitions: offsets and size unknown ("-")
        start = self.end_offsets(online, earliest=True)
        end = self.end_offsets(online)
        sizes = self.partition_sizes(online)
        doc["partition_rows"] = [
            {"topic": name, "partition": p["partition"], "leader": p["leader"],
             "replicas": p["replicas"], "isr": p["isr"],
             "log_start_offset": start.get(k), "log_end_offset": end.get(k),
             "messages": end[k] - start[k] if k in end else None, "size": sizes.get(k, -1)}
            for p, k in zip(doc["partitions"], keys, strict=True)
        ]
        doc["configs"] = topic_describe.topic_configs(self.admin, name, self.bootstrap)
        doc["size"] = sum(max(r["size"], 0) for r in doc["partition_rows"])
        doc["messages"] = sum(r["messages"] or 0 for r in doc["partition_rows"])
        return doc

    def create_topic(self, name: str, partitions: int, replication: int,
                     configs: dict[str, str]) -> None:
        validate_topic_name(name)
        if partitions == 0 or partitions < -1:
            raise CliError("partitions must be at least 1")
        new = NewTopic(name, num_partitions=partitions, replication_factor=replication,
                       config=configs)
        futures = self.admin.create_topics([new], request_timeout=timeout())
        wait_for(futures[name], f"cannot create topic {name!r}", self.bootstrap)

    def delete_topic(self, name: str) -> None:
        futures = self.admin.delete_topics([name], request_timeout=timeout())
        wait_for(futures[name], f"cannot delete topic {name!r}", self.bootstrap)

    def alter_topic_config(self, name: str, key: str, value: str | None) -> None:
        """Set ``key`` (or with ``value`` None, remove the override: back to the default)."""
        if not key.strip():
            raise CliError("config name must not be empty")
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        entry = ConfigEntry(key.strip(), value, incremental_operation=op)
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[entry])
        futures = self.admin.incremental_alter_configs([resource], request_timeout=timeout())
        for future in futures.values():
            wait_for(future, f"cannot alter config {key!r} of {name!r}", self.bootstrap)

    # -- groups ----------------------------------------------------------------------------

    def group_listings(self) -> list[dict[str, Any]]:
        result = wait_for(self.admin.list_consumer_groups(request_timeout=timeout()),
                          "cannot list groups", self.bootstrap)
        return sorted(({"group": g.group_id, "state": state_name(g.state)}
                       for g in result.valid), key=lambda g: g["group"])

    def groups(self) -> list[dict[str, Any]]:
        """Every group with its state, member count and total lag (committed partitions)."""
        listings = self.group_listings()
        if not listings:
            return []
        names = [g["group"] for g in listings]
        futures = self.admin.describe_consumer_groups(names, request_timeout=timeout())
        rows = []
        for listing in listings:
            name = listing["group"]
            desc = wait_for(futures[name], f"cannot describe group {name!r}", self.bootstrap)
            committed = committed_offsets(self.admin, name, self.bootstrap)
            end = end_offsets(self.admin, sorted(committed), self.bootstrap)
            rows.append({
                **listing,
                "state": state_name(desc.state),
                "members": len(desc.members),
                "topics": sorted({t for t, _p in committed}),
                "lag": sum(max(end[k] - off, 0) for k, off in committed.items() if k in end),
            })
        return rows

    def group(self, name: str) -> dict[str, Any]:
        """State, members with their assignments, and lag per partition."""
        desc = describe_group(self.admin, name, self.bootstrap)
        rows = group.offset_rows(self.args(group=name), self.admin, desc)
        members = [
            {"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
             "instance_id": getattr(m, "group_instance_id", None),
             "assignment": sorted((tp.topic, tp.partition) for tp in
                                  (m.assignment.topic_partitions if m.assignment else []))}
            for m in desc.members
        ]
        coord = desc.coordinator
        return {
            "group": name,
            "state": state_name(desc.state),
            "inactive": desc.state in group_reset.INACTIVE and not desc.members,
            "protocol": desc.partition_assignor or None,
            "coordinator": f"{coord.host}:{coord.port} ({coord.id})" if coord else None,
            "members": members,
            "partitions": [r for r in rows if r["topic"] is not None],
            "lag": group.total_lag(rows),
        }

    def reset_plan(self, name: str, topic: str | None, strategy: str,
                   value: str = "") -> list[dict[str, Any]]:
        """The offsets a reset would commit (``strom group reset-offsets``'s plan, clamped to
        each log), with the current committed offset beside each; changes nothing."""
        if strategy not in RESET_STRATEGIES:
            raise CliError(f"unknown reset strategy {strategy!r}: one of "
                           f"{', '.join(RESET_STRATEGIES)}")
        to_offset = None
        if strategy == "offset":
            try:
                to_offset = int(value)
            except ValueError:
                raise CliError(f"invalid offset {value!r}: expected an integer") from None
        if strategy == "datetime" and not value.strip():
            raise CliError("give a date and time to reset to")
        args = self.args(
            group=name, all_topics=not topic, topic=[topic] if topic else None,
            to_earliest=strategy == "earliest", to_latest=strategy == "latest",
            to_offset=to_offset, shift_by=None,
            to_datetime=value.strip() if strategy == "datetime" else None,
        )
        desc = describe_group(self.admin, name, self.bootstrap, must_exist=False)
        group_reset.check_inactive(desc, name)
        committed = committed_offsets(self.admin, name, self.bootstrap)
        targets = group_reset.plan(args, self.admin, committed)
        return [{"topic": t, "partition": p, "current_offset": committed.get((t, p)),
                 "new_offset": off} for (t, p), off in sorted(targets.items())]

    def apply_reset(self, name: str, targets: dict[tuple[str, int], int]) -> None:
        """Commit the offsets a dry run showed (refused while the group has members)."""
        if not targets:
            raise CliError("nothing to reset: the plan is empty")
        desc = describe_group(self.admin, name, self.bootstrap, must_exist=False)
        group_reset.check_inactive(desc, name)
        group_reset.apply_offsets(self.admin, name, targets, self.bootstrap)

    def delete_group(self, name: str) -> None:
        futures = self.admin.delete_consumer_groups([name], request_timeout=timeout())
        wait_for(futures[name], f"cannot delete group {name!r}", self.bootstrap)

