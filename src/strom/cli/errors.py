"""Errors of the ``strom`` CLI and their one-line rendering.

Every failure a user can cause (bad input, unreachable broker, an error the broker returns)
becomes a :class:`CliError`; :func:`strom.cli.main.main` prints it as a single line on stderr
and exits non-zero. No traceback reaches the user unless ``-vv`` is given.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

T = TypeVar("T")

#: Seconds to wait for the broker before giving up (connect, metadata, admin futures).
DEFAULT_TIMEOUT_S = 10.0
_timeout = [DEFAULT_TIMEOUT_S]


def set_timeout(seconds: float) -> None:
    """The wait ``--timeout`` chose for this run (connect, metadata, admin requests)."""
    if not seconds > 0:
        raise CliError(f"--timeout must be a positive number of seconds, got {seconds:g}")
    _timeout[0] = seconds


def timeout() -> float:
    """Seconds to wait for the broker in this run (``--timeout``, default 10)."""
    return _timeout[0]


class CliError(Exception):
    """A failure to report as one line on stderr, with an exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def describe_kafka_error(err: KafkaError | KafkaException | BaseException) -> str:
    """A short human sentence for a librdkafka error: its text and its code name."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    if isinstance(err, KafkaError):
        text = err.str() or err.name()
        name = err.name()
        return text if name and name in text else f"{text} ({name})"
    return str(err) or type(err).__name__


def wait_for(
    future: concurrent.futures.Future[Any],
    what: str,
    bootstrap: str,
    wait: float | None = None,
) -> Any:
    """The result of an AdminClient future, or a :class:`CliError` naming ``what`` failed."""
    seconds = timeout() + 1.0 if wait is None else wait  # request_timeout + a margin
    try:
        return future.result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        raise CliError(
            f"{what}: no answer from the broker at {bootstrap} within {seconds:g} s"
        ) from None
    except KafkaException as exc:
        raise CliError(f"{what}: {describe_kafka_error(exc)}") from None
    except (ValueError, TypeError) as exc:
        raise CliError(f"{what}: {exc}") from None


def guarded(what: str, call: Callable[[], T]) -> T:
    """Run ``call``; turn the client's exceptions into a :class:`CliError` about ``what``."""
    try:
        return call()
    except KafkaException as exc:
        raise CliError(f"{what}: {describe_kafka_error(exc)}") from None
    except (ValueError, TypeError) as exc:
        raise CliError(f"{what}: {exc}") from None
