"""``strom txn list|describe|describe-producers|find-hanging|abort``: transactions, as
``kafka-transactions.sh``.

``find-hanging`` looks at every partition's producers (DescribeProducers) for an open
transaction that its coordinator does not know as ongoing with that partition and epoch, or
that has been open longer than ``--max-transaction-timeout`` minutes (Kafka's default 15);
``abort`` writes an ABORT marker for such a transaction (WriteTxnMarkers), found by
``--start-offset`` or given by ``--producer-id``/``--producer-epoch``. Each request goes where
Kafka's Admin client sends it (:mod:`strom.cli.txn_wire`): ``list`` asks every broker and lists
what those that answered know (one stderr line and exit 1 per broker that did not),
``describe`` the id's coordinator, ``describe-producers``, ``find-hanging``'s producers and
``abort`` each partition's leader. ``find-hanging`` refuses a partial list (an id missing from
it would look hanging).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from strom.cli.clients import add_client_options
from strom.cli.errors import CliError
from strom.cli.output import print_json, print_table
from strom.cli.txn_wire import Cluster
from strom.cli.wire import check


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``txn`` and its subcommands."""
    txn = subparsers.add_parser("txn", help="transactions (list, describe, hanging)",
                                parents=parents)  # fmt: skip
    sub = txn.add_subparsers(dest="txn_command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", help="transactional ids and their state", parents=parents)
    add_client_options(p, listing=True)
    p.set_defaults(func=list_)
    p = sub.add_parser("describe", help="one transactional id", parents=parents)
    p.add_argument("transactional_id", metavar="ID")
    add_client_options(p, listing=True)
    p.set_defaults(func=describe)
    p = sub.add_parser("describe-producers", help="the active producers of one partition",
                       parents=parents)  # fmt: skip
    p.add_argument("--topic", required=True, metavar="T", help="the partition's topic")
    p.add_argument("--partition", required=True, type=int, metavar="N", help="the partition")
    p.add_argument("--broker-id", type=int, metavar="ID",
                   help="ask this broker's replica (default: the partition's leader)")  # fmt: skip
    add_client_options(p, listing=True)
    p.set_defaults(func=describe_producers)
    p = sub.add_parser("find-hanging", help="open transactions no coordinator will end",
                       parents=parents)  # fmt: skip
    p.add_argument("--topic", metavar="T", help="only this topic (default: all)")
    p.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="open longer than this is hanging (default 15)")  # fmt: skip
    add_client_options(p, listing=True)
    p.set_defaults(func=find_hanging)
    p = sub.add_parser("abort", help="abort a hanging transaction in one partition",
                       parents=parents)  # fmt: skip
    p.add_argument("--topic", required=True, metavar="T", help="the partition's topic")
    p.add_argument("--partition", required=True, type=int, metavar="N",
                   help="the partition holding the hanging transaction")  # fmt: skip
    p.add_argument("--start-offset", type=int, metavar="N",
                   help="the first offset of the transaction (see find-hanging)")  # fmt: skip
    p.add_argument("--producer-id", type=int, metavar="ID",
                   help="the transaction's producer id (instead of --start-offset)")
    p.add_argument("--producer-epoch", type=int, metavar="E",
                   help="that producer's epoch (with --producer-id)")
    add_client_options(p)
    p.set_defaults(func=abort)


def _ms(value: Any) -> int:
    if value is None:
        return -1
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


def _report(failures: dict[int, str]) -> int:
    """One stderr line per broker that could not list; the exit code (1 if any)."""
    for why in failures.values():
        print(f"cannot list transactions on {why}", file=sys.stderr)
    return 1 if failures else 0


def list_(args: argparse.Namespace) -> int:
    states, failures = Cluster(args).list_transactions()
    rows = [{"transactional_id": s.transactional_id, "coordinator": broker,
             "producer_id": s.producer_id, "state": s.transaction_state}
            for broker, s in states]  # fmt: skip
    if args.format == "json":
        print_json(rows)
    else:  # Kafka's columns: the coordinator is the broker that listed the id
        print_table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
                    [list(r.values()) for r in rows])  # fmt: skip
    return _report(failures)


def describe(args: argparse.Namespace) -> int:
    s = Cluster(args).describe_transactions([args.transactional_id])[args.transactional_id]
    check(s.error_code, f"cannot describe transactional id {args.transactional_id!r}")
    start = _ms(s.transaction_start_time)
    start = start if start > 0 else -1  # 0: no transaction open (the broker cannot send -1)
    row = {
        "transactional_id": s.transactional_id, "producer_id": s.producer_id,
        "producer_epoch": s.producer_epoch, "state": s.transaction_state,
        "timeout_ms": _ms(s.transaction_timeout), "start_time_ms": start,
        "duration_ms": int(time.time() * 1000) - start if start >= 0 else -1,
        "partitions": [f"{t.topic}-{p}" for t in s.topics for p in t.partitions],
    }  # fmt: skip
    if args.format == "json":
        print_json(row)
    else:
        print_table(["TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
                     "START-TIME-MS", "DURATION-MS", "PARTITIONS"],
                    [[*list(row.values())[:-1], ",".join(row["partitions"]) or "-"]])  # fmt: skip
    return 0


def describe_producers(args: argparse.Namespace) -> int:
    """Kafka's ``describe-producers``: the partition leader's producer state."""
    key = (args.topic, args.partition)
    rows = [{"producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
             "coordinator_epoch": s.coordinator_epoch, "last_sequence": s.last_sequence,
             "last_timestamp": s.last_timestamp, "current_txn_start_offset": s.current_txn_start_offset}
            for s in Cluster(args).describe_producers([key], args.broker_id)[key]]  # fmt: skip
    if args.format == "json":
        print_json(rows)
    else:
        print_table(["PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE",
                     "LAST-TIMESTAMP", "CURRENT-TXN-START-OFFSET"],
                    [list(r.values()) for r in rows])  # fmt: skip
    return 0


def _open_producers(cluster: Cluster, topic: str | None,
                    partition: int | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The producers with an open transaction in ``topic`` (default: every non-internal topic;
    only ``partition`` if given), each asked of its partition's leader."""
    md = cluster.metadata()
    topics = [t for name, t in sorted(md.topics.items())
              if (topic is None or name == topic) and not name.startswith("__")]  # fmt: skip
    if topic is not None and not topics:
        raise CliError(f"topic {topic!r} does not exist")
    keys = [(t.topic, p) for t in topics for p in sorted(t.partitions)
            if partition is None or p == partition]  # fmt: skip
    if partition is not None and not keys:
        raise CliError(f"partition {topic}-{partition} does not exist")
    out = []
    for (name, index), producers in sorted(cluster.describe_producers(keys).items()):
        for s in producers:
            if s.current_txn_start_offset >= 0:
                out.append({"topic": name, "partition": index,
                            "producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                            "coordinator_epoch": s.coordinator_epoch,
                            "start_offset": s.current_txn_start_offset,
                            "last_timestamp": s.last_timestamp})  # fmt: skip
    return out


def find_hanging(args: argparse.Namespace) -> int:
    cluster = Cluster(args)
    candidates = _open_producers(cluster, args.topic)
    listed, failures = cluster.list_transactions()
    if failures:  # an id missing from the list would look hanging: no partial answer here
        raise CliError(f"cannot list transactions on {next(iter(failures.values()))}")
    by_pid = {s.producer_id: s.transactional_id for _broker, s in listed}
    ids = {by_pid[c["producer_id"]] for c in candidates if c["producer_id"] in by_pid}
    states = cluster.describe_transactions(sorted(ids))
    now = int(time.time() * 1000)
    hanging = []
    for c in candidates:
        c["duration_min"] = max(0, now - c["last_timestamp"]) // 60_000
        s = states.get(by_pid.get(c["producer_id"], ""))
        known = (s is not None and s.transaction_state == "Ongoing"
                 and s.producer_epoch == c["producer_epoch"]
                 and any(t.topic == c["topic"] and c["partition"] in t.partitions
                         for t in s.topics))  # fmt: skip
        if not known or c["duration_min"] >= args.max_transaction_timeout:
            hanging.append(c)
    if args.format == "json":
        print_json(hanging)
    else:
        print_table(["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH",
                     "START-OFFSET", "LAST-TIMESTAMP", "DURATION(MIN)"],
                    [list(h.values()) for h in hanging])  # fmt: skip
    return 0


def abort(args: argparse.Namespace) -> int:
    cluster = Cluster(args)
    pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, -1
    if args.start_offset is not None:
        match = [c for c in _open_producers(cluster, args.topic, args.partition)
                 if c["start_offset"] == args.start_offset]  # fmt: skip
        if not match:
            raise CliError(f"no open transaction starts at offset {args.start_offset} of "
                           f"{args.topic}-{args.partition}")  # fmt: skip
        pid, epoch = match[0]["producer_id"], match[0]["producer_epoch"]
        coordinator_epoch = match[0]["coordinator_epoch"]
    elif pid is None or epoch is None:
        raise CliError("give --start-offset, or --producer-id and --producer-epoch")
    cluster.abort((args.topic, args.partition), pid, epoch, coordinator_epoch)
    print(f"aborted the transaction of producer {pid} (epoch {epoch}) in "
          f"{args.topic}-{args.partition}")  # fmt: skip
    return 0
