"""Topic config changes made anywhere in the cluster reach this broker's logs.

Kafka's ``TopicConfigHandler``: an AlterConfigs / IncrementalAlterConfigs of a topic is handled
by one broker, which writes ``/config/topics/<t>`` and reconfigures its own logs
(:func:`strom.broker.config_resources.apply_topic_overrides`). Every other broker hosting
replicas of the topic learns of it through its :class:`~strom.metadata.topics.TopicRegistry`
(which watches the config node) and must apply it to its logs too, or a leader elsewhere would
go on with the old ``min.insync.replicas``, ``retention.ms``, ``max.message.bytes`` …

Invariant: after the registry shows a topic's overrides, every local log of that topic has the
config made from those overrides and the broker's defaults (unless they do not validate here,
which is logged and leaves the previous config).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.metadata.topics import TopicInfo, TopicRegistry
    from strom.storage.log_manager import LogManager

log = logging.getLogger(__name__)


def start(topics: TopicRegistry, logs: LogManager) -> None:
    """Listen to the topic registry; call once the logs are loaded."""
    applied = {info.name: dict(info.configs) for info in topics}

    def on_topic(name: str, info: TopicInfo | None) -> None:
        if info is None:
            applied.pop(name, None)
            return
        configs = dict(info.configs)
        before = applied.get(name)
        applied[name] = configs
        if before is None or before == configs:
            # a new topic (its logs, made here later, take the registry's configs) or a
            # partition / version change, not a config change
            return
        try:
            logs.update_topic_config(name, configs)
        except Exception as exc:  # an override this broker cannot apply: keep the old config
            log.error("config change of topic %s not applied here: %s", name, exc)
            return
        log.info("topic %s config overrides now %s", name, configs)

    topics.add_listener(on_topic)
