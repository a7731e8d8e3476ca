"""``strom acl create|list|delete``: ACLs with ``kafka-acls.sh``'s options.

``create`` is kafka-acls' ``--add``, ``delete`` its ``--remove`` (no prompt: scripts use
``--force`` anyway), ``list`` its ``--list``. The options and the bindings they expand to
(``--producer`` / ``--consumer`` shortcuts included): :mod:`strom.admin.acls`. Output: one row
per ACL, kafka-acls' fields as columns, or JSON.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from strom.admin import acls
from strom.admin.errors import InvalidInputError
from strom.cli.clients import checked_session
from strom.cli.options import add_client_options
from strom.cli.output import print_json, print_table

HEADERS = ("RESOURCE-TYPE", "NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST", "OPERATION",
           "PERMISSION")  # fmt: skip


def _resource_options(p: argparse.ArgumentParser, pattern_default: str) -> None:
    p.add_argument("--topic", action="append", default=[], metavar="T", help="a topic (repeatable)")
    p.add_argument("--group", action="append", default=[], metavar="G", help="a group (repeatable)")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                   dest="transactional_ids", help="a transactional id (repeatable)")  # fmt: skip
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default=pattern_default, metavar="TYPE",
                   help=f"literal, prefixed (and for list/delete: match, any); "
                        f"default {pattern_default}")  # fmt: skip
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                        "AlterConfigs, DescribeConfigs, IdempotentWrite, All (repeatable)")  # fmt: skip


def _principal_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-principal", action="append", default=[], metavar="P",
                   help="User:NAME allowed (repeatable)")  # fmt: skip
    p.add_argument("--deny-principal", action="append", default=[], metavar="P",
                   help="User:NAME denied (repeatable)")  # fmt: skip


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``acl`` and its subcommands."""
    parser = subparsers.add_parser("acl", parents=parents,
                                   help="access control lists (create, list, delete)")  # fmt: skip
    sub = parser.add_subparsers(dest="acl_command", metavar="COMMAND", required=True)

    p = sub.add_parser("create", help="add ACLs (kafka-acls --add)", parents=parents)
    _principal_options(p)
    p.add_argument("--allow-host", action="append", default=[], metavar="H",
                   help="host of the allowed principals (default *)")  # fmt: skip
    p.add_argument("--deny-host", action="append", default=[], metavar="H",
                   help="host of the denied principals (default *)")  # fmt: skip
    _resource_options(p, "literal")
    p.add_argument("--producer", action="store_true",
                   help="WRITE, DESCRIBE, CREATE on the topics (and the transactional ids)")
    p.add_argument("--idempotent", action="store_true",
                   help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--consumer", action="store_true",
                   help="READ, DESCRIBE on the topics and READ on the groups")
    add_client_options(p, listing=True)
    p.set_defaults(func=create)

    p = sub.add_parser("list", help="list ACLs (kafka-acls --list)", parents=parents)
    p.add_argument("--principal", metavar="P", help="only this principal's ACLs")
    _resource_options(p, "any")
    add_client_options(p, listing=True)
    p.set_defaults(func=list_)

    p = sub.add_parser("delete", help="remove ACLs (kafka-acls --remove)", parents=parents)
    _principal_options(p)
    _resource_options(p, "literal")
    add_client_options(p, listing=True)
    p.set_defaults(func=delete)


def _spec(args: argparse.Namespace) -> acls.AclSpec:
    return acls.AclSpec(
        allow_principals=getattr(args, "allow_principal", []),
        deny_principals=getattr(args, "deny_principal", []),
        allow_hosts=getattr(args, "allow_host", []), deny_hosts=getattr(args, "deny_host", []),
        operations=args.operation, topics=args.topic, groups=args.group,
        transactional_ids=args.transactional_ids, cluster=args.cluster,
        pattern_type=args.resource_pattern_type, producer=getattr(args, "producer", False),
        consumer=getattr(args, "consumer", False), idempotent=getattr(args, "idempotent", False),
    )  # fmt: skip


def _print(args: argparse.Namespace, rows: list[acls.AclRow]) -> None:
    if args.format == "json":
        print_json([asdict(r) for r in rows])
    else:
        print_table(HEADERS, [list(asdict(r).values()) for r in rows])


def create(args: argparse.Namespace) -> int:
    made = acls.bindings(_spec(args))  # options checked before the broker is asked
    _print(args, acls.create(checked_session(args), made))
    return 0


def list_(args: argparse.Namespace) -> int:
    wanted = acls.filters(_spec(args), args.principal)
    _print(args, acls.describe(checked_session(args), wanted))
    return 0


def delete(args: argparse.Namespace) -> int:
    spec = _spec(args)
    if not spec.resources() and not (spec.allow_principals or spec.deny_principals):
        raise InvalidInputError("name what to delete: a resource or a principal")
    _print(args, acls.delete(checked_session(args), acls.filters(spec)))
    return 0
