"""Partitions hosted by this broker: their logs, appends, reads, high watermarks.

On a single node every partition's only replica is local and the leader, so the high
watermark is the log end offset after each append; replication (a later issue) moves it with
follower fetches instead. Appends wake long-polling fetchers through the purgatory. Logs are
created and removed by :mod:`strom.broker.topic_lifecycle`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from strom.broker.leader_epochs import LEADER_EPOCH
from strom.broker.purgatory import DataPurgatory
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.batch_validation import AppendOrigin

if TYPE_CHECKING:
    from strom.storage.log import AppendResult, Log
    from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)


class ReplicaManager:
    def __init__(self, logs: LogManager, node_id: int) -> None:
        self.logs = logs
        self.node_id = node_id
        self.purgatory = DataPurgatory()

    def get_log(self, topic: str, partition: int) -> Log:
        log_ = self.logs.get(topic, partition)
        if log_ is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"{topic}-{partition} is not hosted here"
            )
        return log_

    def append(self, topic: str, partition: int, records: bytes,
               origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:  # fmt: skip
        """Append as the partition's leader: ``origin`` says how much is validated."""
        log_ = self.get_log(topic, partition)
        result = log_.append(records, origin=origin, leader_epoch=LEADER_EPOCH)
        log_.high_watermark = log_.log_end_offset
        self.purgatory.notify((topic, partition))
        return result

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.get_log(topic, partition).high_watermark
