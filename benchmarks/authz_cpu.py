"""Broker CPU per single-message Produce request with authorization off and on, same run.

Uses :mod:`benchmarks.produce_cpu`'s in-process broker and counting transport (one connection
object fed Produce v9 frames of one 100-byte record, acks=1) three times:

- ``off``: no ``authorizer.class.name`` (what every unsecured broker pays: one attribute test);
- ``acls``: StandardAuthorizer with ``--acls`` ACLs stored (a LITERAL ALLOW WRITE for the
  producer on the topic, the rest on other topics, prefixed and literal), the producer's
  decisions served from the authorizer's cache after the first request;
- ``uncached_decision_us``: the cost of one decision with those ACLs when the cache does not
  hold it (every ACL change clears it), measured on the authorizer directly.

The modes run interleaved, ``--repeat`` times each, and the best round of each is reported
(other jobs on a shared machine only ever add to a round). Prints one JSON line::

    PYTHONPATH=src python benchmarks/authz_cpu.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from produce_cpu import CountingTransport, _feed, broker_connection, produce_frames  # noqa: E402

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


async def _bindings(count: int) -> list[Any]:
    from strom.security.acl import (
        AccessControlEntry,
        AclBinding,
        AclOperation,
        PatternType,
        PermissionType,
        ResourcePattern,
        ResourceType,
    )

    def allow(name: str, pattern: PatternType, principal: str) -> Any:
        return AclBinding(ResourcePattern(ResourceType.TOPIC, name, pattern),
                          AccessControlEntry(principal, "*", AclOperation.WRITE,
                                             PermissionType.ALLOW))  # fmt: skip

    out = [allow("bench", PatternType.LITERAL, "User:ANONYMOUS")]
    for i in range(count - 1):
        out.append(allow(f"other-{i}", PatternType.PREFIXED if i % 2 else PatternType.LITERAL,
                         f"User:u{i}"))  # fmt: skip
    return out


async def one_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    settings = {} if mode == "off" else {"authorizer.class.name": STANDARD}
    transport = CountingTransport()
    async with broker_connection(transport, settings) as (broker, conn):
        uncached = None
        if mode != "off":
            authorizer = broker.services.authorizer
            await broker.services.acls.create(await _bindings(args.acls))
            from strom.security.acl import AclOperation, ResourceType

            names = [f"bench-{i}" for i in range(2000)]  # each a miss of the decision cache
            t0 = time.process_time()
            for name in names:
                authorizer.authorize("User:ANONYMOUS", "127.0.0.1", AclOperation.WRITE,
                                     ResourceType.TOPIC, name)  # fmt: skip
            uncached = (time.process_time() - t0) * 1e6 / len(names)
        sent = 0
        warm = produce_frames("bench", 2000, sent)
        await _feed(conn, warm, args.burst, transport, 0)
        sent += len(warm)
        rounds = []
        for _ in range(args.rounds):
            frames = produce_frames("bench", args.requests, sent)
            c0 = time.process_time()
            await _feed(conn, frames, args.burst, transport, sent)
            rounds.append((time.process_time() - c0) * 1e6 / len(frames))
            sent += len(frames)
        log = broker.services.replicas.get_log("bench", 0)
        if log.log_end_offset != sent:
            raise RuntimeError(f"{mode}: {log.log_end_offset} stored, {sent} sent (refused?)")
        return {"cpu_us": min(rounds), "uncached_decision_us": uncached}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--burst", type=int, default=4)
    parser.add_argument("--acls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    best: dict[str, float] = {}
    uncached: list[float] = []
    for _ in range(args.repeat):
        for mode in ("off", "acls"):
            result = asyncio.run(one_mode(mode, args))
            best[mode] = min(best.get(mode, float("inf")), result["cpu_us"])
            if result["uncached_decision_us"] is not None:
                uncached.append(result["uncached_decision_us"])
    print(json.dumps({
        "requests_per_round": args.requests, "acls": args.acls,
        "cpu_us_per_request_off": round(best["off"], 2),
        "cpu_us_per_request_acls": round(best["acls"], 2),
        "authz_cpu_us_per_request": round(best["acls"] - best["off"], 2),
        "ratio_acls_to_off": round(best["acls"] / best["off"], 3),
        "uncached_decision_us": round(min(uncached), 2),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
