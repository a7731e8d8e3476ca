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

from strom.admin.cluster import elect_leaders as elect
from strom.cli.clients import checked_session
from strom.cli.errors import CliError
from strom.cli.options import add_client_options
from strom.cli.output import print_json


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


def elect_leaders(args: argparse.Namespace) -> int:
    """Send ElectLeaders (through the controller) and report each partition's outcome."""
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic")
    result = elect(checked_session(args), args.unclean, args.topic, args.partition)
    name = result.election_type
    if args.format == "json":
        print_json([{"election_type": name, "elected": result.elected,
                     "not_needed": result.not_needed,
                     "failed": [{"partition": p, "error": e} for p, e in result.failed]}])
    else:
        if result.elected:
            print(f"Successfully completed leader election ({name}) for partitions "
                  + ", ".join(result.elected))  # fmt: skip
        if result.not_needed:
            print("Valid replica already elected for partitions " + ", ".join(result.not_needed))
        for label, error in result.failed:
            print(f"Error completing leader election ({name}) for partition: {label}: {error}")
        if not (result.elected or result.not_needed or result.failed):
            print("No partitions to elect leaders for")
    return 1 if result.failed else 0
