"""``strom cluster elect-leaders``: preferred or unclean leader election (ElectLeaders, KIP-460).

As kafka-leader-election.sh: ``--preferred`` (default) moves leadership back to each
partition's first replica when it is in the ISR; ``--unclean`` elects a leader outside the ISR
for partitions that have none (data may be lost). ``--topic T [--partition P]`` restricts it;
without ``--topic`` every partition of the cluster is considered. Output lines are Kafka's::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <reason>

Exit code 1 if any partition failed (ELECTION_NOT_NEEDED is not a failure).
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import CliError, describe_kafka_error, wait_for
from strom.cli.output import print_json

ELECTION_NOT_NEEDED = 84


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``cluster elect-leaders``."""
    p = sub.add_parser("elect-leaders", help="preferred or unclean leader election",
                       parents=parents)  # fmt: skip
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--preferred", action="store_true",
                      help="move leadership to each partition's preferred replica (default)")
    kind.add_argument("--unclean", action="store_true",
                      help="elect a leader outside the ISR where none is in it (may lose data)")
    p.add_argument("--topic", metavar="T", help="only this topic's partitions")
    p.add_argument("--partition", type=int, metavar="P", help="only this partition (with --topic)")
    add_client_options(p, listing=True)
    p.set_defaults(func=elect_leaders)


def _error_code(err: Any) -> int:
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return int(err.args[0].code())
    if isinstance(err, KafkaError):
        return int(err.code())
    return -1


def elect_leaders(args: argparse.Namespace) -> int:
    """Send ElectLeaders (through the controller) and report each partition's outcome."""
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic")
    election = ElectionType.UNCLEAN if args.unclean else ElectionType.PREFERRED
    admin = admin_client(args)
    partitions: list[TopicPartition] | None = None
    if args.topic is not None:
        topic = metadata(admin, args, args.topic).topics.get(args.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise CliError(f"topic {args.topic!r} does not exist")
        if args.partition is not None and args.partition not in topic.partitions:
            raise CliError(f"topic {args.topic!r} has no partition {args.partition}")
        ids = [args.partition] if args.partition is not None else sorted(topic.partitions)
        partitions = [TopicPartition(args.topic, i) for i in ids]
    # No request_timeout/operation_timeout: confluent-kafka 2.16's elect_leaders refuses both
    # (a SystemError in its C argument parsing); wait_for bounds the wait instead.
    future = admin.elect_leaders(election, partitions)
    results = wait_for(future, "leader election failed", args.bootstrap_server)
    done, not_needed, failed = [], [], []
    for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        label = f"{tp.topic}-{tp.partition}"
        if err is None:
            done.append(label)
        elif _error_code(err) == ELECTION_NOT_NEEDED:
            not_needed.append(label)
        else:
            failed.append((label, describe_kafka_error(err)))
    name = election.name
    if args.format == "json":
        print_json([{"election_type": name, "elected": done, "not_needed": not_needed,
                     "failed": [{"partition": p, "error": e} for p, e in failed]}])  # fmt: skip
    else:
        if done:
            print(f"Successfully completed leader election ({name}) for partitions "
                  + ", ".join(done))  # fmt: skip
        if not_needed:
            print("Valid replica already elected for partitions " + ", ".join(not_needed))
        for label, error in failed:
            print(f"Error completing leader election ({name}) for partition: {label}: {error}")
        if not (done or not_needed or failed):
            print("No partitions to elect leaders for")
    return 1 if failed else 0
