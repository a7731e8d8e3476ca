"""The admin layer's errors: one readable sentence each, never a traceback.

Every failure a caller can cause or meet (bad input, an unreachable broker, an answer the
broker refused) is an :class:`AdminError` whose ``message`` is a sentence fit for a user: the
CLI prints it on one line of stderr, the console shows it on the page. The subclasses let a
caller tell the kinds apart (retry an unreachable broker, not a refused request).
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException


class AdminError(Exception):
    """A failure to show a user as it is: ``message`` is one sentence."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInputError(AdminError):
    """Input refused before anything was sent (a malformed address, name, offset, plan)."""


class NotFoundError(AdminError):
    """A topic, partition, group, broker or file named by the caller does not exist."""


class UnreachableError(AdminError):
    """No answer: the broker (or Connect worker) could not be reached or did not answer."""


class TimedOutError(UnreachableError):
    """The broker was reached, or tried, but gave no answer within the timeout."""


class RefusedError(AdminError):
    """The broker (or Connect worker) answered with an error."""


def describe_kafka_error(err: KafkaError | KafkaException | BaseException) -> str:
    """A short human sentence for a librdkafka error: its text and its code name."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if isinstance(err, KafkaError):
        text = err.str() or err.name()
        name = err.name()
        return text if name and name in text else f"{text} ({name})"
    return str(err) or type(err).__name__


def forget_frames(exc: BaseException) -> None:
    """Drop what a caught exception holds of the frames it passed through (its traceback) and
    of the exception it was raised while handling.

    For confluent-kafka's exceptions: with 2.16, the KafkaException ``commit_transaction``
    raises for timed-out messages is never freed (one reference no collectable object owns),
    and its traceback would keep every local of those frames alive, producers included, which
    go on connecting to their cluster. Re-raise a fresh copy (:func:`fresh`) rather than the
    caught one, whose traceback would grow again as it propagates."""
    exc.__traceback__ = None
    exc.__context__ = None
    exc.__cause__ = None


def fresh(exc: KafkaException) -> KafkaException:
    """``exc``, let go of (:func:`forget_frames`), as a new KafkaException with the same
    KafkaError: what to raise in its place (``raise fresh(exc) from None``)."""
    forget_frames(exc)
    return KafkaException(*exc.args)
