"""``strom txn list|describe|find-hanging|abort``: transactions, as ``kafka-transactions.sh``.

``find-hanging`` looks at every partition's producers (DescribeProducers) for an open
transaction that its coordinator does not know as ongoing with that partition and epoch, or
that has been open longer than ``--max-transaction-timeout`` minutes (Kafka's default 15);
``abort`` writes an ABORT marker for such a transaction (WriteTxnMarkers), found by
``--start-offset`` or given by ``--producer-id``/``--producer-epoch``.

Each request goes where Kafka's admin client sends it, so the tools work on a cluster too:
ListTransactions to every broker (each lists the ids it coordinates), DescribeTransactions to
the id's coordinator (FindCoordinator), DescribeProducers and WriteTxnMarkers to each
partition's leader (Metadata). On a single node all of them are the bootstrap broker.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import CliError
from strom.cli.output import print_json, print_table
from strom.cli.wire import check, part, request

LIST, DESCRIBE, PRODUCERS, MARKERS, METADATA, FIND_COORDINATOR = 66, 65, 61, 27, 3, 10


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


def _brokers(bootstrap: str) -> dict[int, str]:
    """Every live broker's address by id (Metadata v9 from the first bootstrap server)."""
    resp = request(bootstrap, METADATA, 9, topics=(), allow_auto_topic_creation=False,
                   include_cluster_authorized_operations=False,
                   include_topic_authorized_operations=False)  # fmt: skip
    return {int(b.node_id): f"{b.host}:{int(b.port)}" for b in resp.brokers}


def _list(bootstrap: str) -> list[Any]:
    states = []
    for address in _brokers(bootstrap).values():
        resp = request(address, LIST, 1, state_filters=(), producer_id_filters=(),
                       duration_filter=-1)  # fmt: skip
        check(resp.error_code, "cannot list transactions")
        states.extend(resp.transaction_states)
    return states


def _coordinator(bootstrap: str, txn_id: str) -> str:
    resp = request(bootstrap, FIND_COORDINATOR, 3, key=txn_id, key_type=1)
    check(resp.error_code, f"no coordinator for transactional id {txn_id!r}")
    return f"{resp.host}:{int(resp.port)}"


def _describe(bootstrap: str, txn_ids: list[str]) -> list[Any]:
    return [state for txn_id in txn_ids
            for state in request(_coordinator(bootstrap, txn_id), DESCRIBE, 0,
                                 transactional_ids=(txn_id,)).transaction_states]  # fmt: skip


def _leader_address(md: Any, topic: str, partition: int) -> str:
    p = md.topics[topic].partitions.get(partition) if topic in md.topics else None
    if p is None or p.leader < 0 or p.leader not in md.brokers:
        raise CliError(f"{topic}-{partition} has no leader")
    b = md.brokers[p.leader]
    return f"{b.host}:{b.port}"


def _ms(value: Any) -> int:
    if value is None:
        return -1
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


def list_(args: argparse.Namespace) -> int:
    rows = [{"transactional_id": s.transactional_id, "producer_id": s.producer_id,
             "state": s.transaction_state} for s in _list(args.bootstrap_server)]  # fmt: skip
    if args.format == "json":
        print_json(rows)
    else:
        print_table(["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"],
                    [[r["transactional_id"], r["producer_id"], r["state"]] for r in rows])  # fmt: skip
    return 0


def describe(args: argparse.Namespace) -> int:
    (s,) = _describe(args.bootstrap_server, [args.transactional_id])
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


def _open_producers(args: argparse.Namespace) -> list[dict[str, Any]]:
    md = metadata(admin_client(args, check=False), args)
    topics = [t for name, t in sorted(md.topics.items())
              if (args.topic is None or name == args.topic) and not name.startswith("__")]  # fmt: skip
    if args.topic is not None and not topics:
        raise CliError(f"topic {args.topic!r} does not exist")
    by_leader: dict[str, dict[str, list[int]]] = {}  # leader address -> topic -> partitions
    for t in topics:
        for p in sorted(t.partitions):
            by_leader.setdefault(_leader_address(md, t.topic, p), {}).setdefault(t.topic, []).append(p)
    out = []
    for address, wanted in by_leader.items():
        req = tuple(part(PRODUCERS, 0, "TopicRequest", name=name, partition_indexes=tuple(ps))
                    for name, ps in wanted.items())  # fmt: skip
        for topic in request(address, PRODUCERS, 0, topics=req).topics:
            for p in topic.partitions:
                check(p.error_code, f"cannot describe producers of {topic.name}-{p.partition_index}")
                for s in p.active_producers:
                    if s.current_txn_start_offset >= 0:
                        out.append({"topic": topic.name, "partition": p.partition_index,
                                    "producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                                    "coordinator_epoch": s.coordinator_epoch,
                                    "start_offset": s.current_txn_start_offset,
                                    "last_timestamp": s.last_timestamp})  # fmt: skip
    return sorted(out, key=lambda c: (c["topic"], c["partition"], c["start_offset"]))


def find_hanging(args: argparse.Namespace) -> int:
    candidates = _open_producers(args)
    by_pid = {s.producer_id: s.transactional_id for s in _list(args.bootstrap_server)}
    states = {s.transactional_id: s for s in _describe(args.bootstrap_server,
              sorted({by_pid[c["producer_id"]] for c in candidates if c["producer_id"] in by_pid}))}  # fmt: skip
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
    pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, -1
    if args.start_offset is not None:
        match = [c for c in _open_producers(argparse.Namespace(**{**vars(args), "format": "text"}))
                 if c["partition"] == args.partition and c["start_offset"] == args.start_offset]  # fmt: skip
        if not match:
            raise CliError(f"no open transaction starts at offset {args.start_offset} of "
                           f"{args.topic}-{args.partition}")  # fmt: skip
        pid, epoch = match[0]["producer_id"], match[0]["producer_epoch"]
        coordinator_epoch = match[0]["coordinator_epoch"]
    elif pid is None or epoch is None:
        raise CliError("give --start-offset, or --producer-id and --producer-epoch")
    topic = part(MARKERS, 1, "WritableTxnMarkerTopic", name=args.topic,
                 partition_indexes=(args.partition,))  # fmt: skip
    marker = part(MARKERS, 1, "WritableTxnMarker", producer_id=pid, producer_epoch=epoch,
                  transaction_result=False, topics=(topic,),
                  coordinator_epoch=max(coordinator_epoch, 0))  # fmt: skip
    md = metadata(admin_client(args, check=False), args, args.topic)
    resp = request(_leader_address(md, args.topic, args.partition), MARKERS, 1, markers=(marker,))
    check(resp.markers[0].topics[0].partitions[0].error_code,
          f"cannot abort the transaction of producer {pid} in {args.topic}-{args.partition}")  # fmt: skip
    print(f"aborted the transaction of producer {pid} (epoch {epoch}) in "
          f"{args.topic}-{args.partition}")  # fmt: skip
    return 0
