"""``strom cluster info``: cluster id, controller and brokers."""

from __future__ import annotations

import argparse
from typing import Any

from strom.cli.clients import add_client_options, admin_client, metadata
from strom.cli.errors import wait_for
from strom.cli.output import print_json, print_table


def add_parser(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``cluster`` and its subcommands."""
    cluster = subparsers.add_parser("cluster", help="cluster-wide information", parents=parents)
    sub = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    p = sub.add_parser("info", help="cluster id, controller, brokers", parents=parents)
    add_client_options(p, listing=True)
    p.set_defaults(func=info)


def info(args: argparse.Namespace) -> int:
    """Describe the cluster (DescribeCluster, with topic count from Metadata)."""
    admin = admin_client(args, check=False)
    md = metadata(admin, args)
    desc = wait_for(
        admin.describe_cluster(request_timeout=10.0),
        "cannot describe the cluster",
        args.bootstrap_server,
    )
    controller = desc.controller.id if desc.controller is not None else md.controller_id
    brokers = sorted(
        ({"id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in desc.nodes),
        key=lambda b: b["id"],
    )
    document = {
        "cluster_id": desc.cluster_id or md.cluster_id,
        "controller": controller,
        "brokers": brokers,
        "topics": len(md.topics),
    }
    if args.format == "json":
        print_json(document)
        return 0
    print(f"Cluster ID: {document['cluster_id']}")
    print(f"Controller: {controller}")
    print(f"Topics: {document['topics']}")
    print()
    print_table(
        ("ID", "HOST", "PORT", "RACK"),
        [
            (f"{b['id']}*" if b["id"] == controller else b["id"], b["host"], b["port"], b["rack"])
            for b in brokers
        ],
    )
    return 0
