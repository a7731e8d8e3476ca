"""The transaction admin requests confluent-kafka does not offer (KIP-664: ListTransactions,
DescribeTransactions, DescribeProducers; WriteTxnMarkers for an operator's abort), sent over
strom's own codec: one request per connection to the first bootstrap server, which on a
single node is the transaction coordinator and every partition's leader.
"""

from __future__ import annotations

from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType

from strom.cli.errors import DEFAULT_TIMEOUT_S, CliError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages import build
from strom.testing.raw import RawConnection


def request(bootstrap: str, api_key: int, version: int, **fields: Any) -> Any:
    """Send one request and return the decoded response; an unreachable broker is a CliError."""
    server = bootstrap.split(",")[0].strip()
    try:
        with RawConnection(server, timeout=DEFAULT_TIMEOUT_S) as conn:
            return conn.request(api_key, version, **fields)
    except (OSError, ConnectionError) as exc:
        raise CliError(f"cannot reach the broker at {server}: {exc}") from None


def part(api_key: int, version: int, class_name: str, **fields: Any) -> Any:
    """A nested request entity of that API version, by class name."""
    return build(getattr(load_payload_module(api_key, version, EntityType.request), class_name),
                 **fields)  # fmt: skip


def check(code: Any, what: str) -> None:
    if int(code) != 0:
        raise CliError(f"{what}: {ErrorCode(int(code)).name.upper()}")
