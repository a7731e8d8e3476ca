"""Record timestamps as people write them: ISO 8601 in, ISO 8601 (UTC, milliseconds) out."""

from __future__ import annotations

from datetime import UTC, datetime

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

from strom.admin.errors import InvalidInputError

#: confluent-kafka's timestamp types by Kafka's names (``TIMESTAMP_NOT_AVAILABLE`` absent).
TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: "CreateTime", TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}


def parse_datetime_ms(value: str, what: str = "--to-datetime") -> int:
    """An ISO-8601 time (``Z`` accepted; no zone means UTC) to epoch milliseconds; ``what``
    names the input in the error."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(f"invalid {what} {value!r}: expected ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def iso_ms(epoch_ms: int) -> str:
    """``2024-05-01T12:00:00.123Z``."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"
