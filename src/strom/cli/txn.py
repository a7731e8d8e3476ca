"""``strom txn list|describe|describe-producers|find-hanging|abort``: transactions, as
``kafka-transactions.sh``.

What each does and where each request goes (as Kafka's Admin client sends it):
:mod:`strom.admin.transactions`. ``list`` lists what the brokers that answered know (one
stderr line and exit 1 per broker that did not); ``find-hanging`` refuses a partial list (an
id missing from it would look hanging).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any

from strom.admin import transactions
from strom.cli.clients import session
from strom.cli.options import add_client_options
from strom.cli.output import print_json, print_table


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``txn`` and its subcommands."""
    parser = subparsers.add_parser(
        "txn", parents=parents,
        help="transactions (list, describe, describe-producers, find-hanging, abort)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="txn_command", metavar="COMMAND", required=True)
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


def _report(failures: dict[int, str]) -> int:
    """One stderr line per broker that could not list; the exit code (1 if any)."""
    for why in failures.values():
        print(f"cannot list transactions on {why}", file=sys.stderr)
    return 1 if failures else 0


def list_(args: argparse.Namespace) -> int:
    rows, failures = transactions.list_transactions(session(args))
    if args.format == "json":
        print_json([asdict(r) for r in rows])
    else:  # Kafka's columns: the coordinator is the broker that listed the id
        print_table(["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"],
                    [list(asdict(r).values()) for r in rows])  # fmt: skip
    return _report(failures)


def describe(args: argparse.Namespace) -> int:
    d = transactions.describe_transaction(session(args), args.transactional_id)
    row = asdict(d)
    if args.format == "json":
        print_json(row)
    else:
        print_table(["TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
                     "START-TIME-MS", "DURATION-MS", "PARTITIONS"],
                    [[*list(row.values())[:-1], ",".join(d.partitions) or "-"]])  # fmt: skip
    return 0


def describe_producers(args: argparse.Namespace) -> int:
    """Kafka's ``describe-producers``: the partition leader's producer state."""
    rows = [asdict(p) for p in transactions.describe_producers(
        session(args), args.topic, args.partition, args.broker_id)]  # fmt: skip
    if args.format == "json":
        print_json(rows)
    else:
        print_table(["PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE",
                     "LAST-TIMESTAMP", "CURRENT-TXN-START-OFFSET"],
                    [list(r.values()) for r in rows])  # fmt: skip
    return 0


def find_hanging(args: argparse.Namespace) -> int:
    hanging = transactions.find_hanging(session(args), args.topic,
                                        args.max_transaction_timeout)  # fmt: skip
    if args.format == "json":
        print_json([asdict(h) for h in hanging])
    else:
        print_table(["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH",
                     "START-OFFSET", "LAST-TIMESTAMP", "DURATION(MIN)"],
                    [list(asdict(h).values()) for h in hanging])  # fmt: skip
    return 0


def abort(args: argparse.Namespace) -> int:
    pid, epoch = transactions.abort(
        session(args), args.topic, args.partition, start_offset=args.start_offset,
        producer_id=args.producer_id, producer_epoch=args.producer_epoch)  # fmt: skip
    print(f"aborted the transaction of producer {pid} (epoch {epoch}) in "
          f"{args.topic}-{args.partition}")  # fmt: skip
    return 0
