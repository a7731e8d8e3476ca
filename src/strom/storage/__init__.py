"""Partition storage: Kafka's on-disk log layout (segments, indexes, checkpoints).

Knows nothing of the network. Entry points: :class:`LogManager` (all logs of a data dir),
:class:`Log` (one partition), :class:`LogConfig` (topic configs), :class:`AppendOrigin`
(who appends, which decides what is validated).
"""

from strom.storage.batch_validation import AppendOrigin
from strom.storage.errors import StorageError
from strom.storage.log import AppendResult, Log, ReadResult
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager

__all__ = ["AppendOrigin", "AppendResult", "Log", "LogConfig", "LogManager", "ReadResult", "StorageError"]
