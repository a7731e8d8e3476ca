# The native record codec (_records_native.c); see strom/protocol/_records_py.py for the
# specification of each function (same arguments, results and errors).
from collections.abc import Callable, Sequence
from typing import Any

from strom.protocol.varint import Buffer

def scan(buf: Buffer, start: int, end: int, count: int, ts_low: int, ts_high: int,
         no_timestamp: int, keys_required: bool,
         error: type[Exception]) -> tuple[int, list[int], list[int], int]: ...
def decode(buf: Buffer, start: int, end: int, count: int, base_offset: int, base_ts: int,
           ts_type: int, max_ts: int, error: type[Exception],
           record: type[Any]) -> list[Any]: ...
def columns(segments: Sequence[tuple[Buffer, int, int, int, int, int, int, int]], lo: int,
            hi: int, with_headers: bool, error: type[Exception]) -> tuple[Any, ...]: ...
def murmur2(data: Buffer) -> int: ...
def encode(keys: tuple[Buffer | None, Buffer, Buffer | None, int, int] | None,
           values: tuple[Buffer | None, Buffer, Buffer | None, int, int], partitions: int,
           null_key_partition: int, timestamp_ms: int, max_batch_bytes: int,
           crc: Callable[[Buffer], int]) -> dict[int, list[bytes]]: ...
