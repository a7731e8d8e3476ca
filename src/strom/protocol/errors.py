"""Kafka error codes on the wire, and the exceptions handlers raise to send one.

The wire enum is ``kio``'s :class:`ErrorCode` (stable, generated from Kafka's own list). A
handler raises :class:`KafkaError` (or a storage error carrying an ``error_code``) and the
handler boundary maps it to the code; nothing else reaches the wire.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_code_of"]


class KafkaError(Exception):
    """An error with the Kafka code it is answered with."""

    error_code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, error_code: ErrorCode | None = None, message: str | None = None) -> None:
        if error_code is not None:
            self.error_code = error_code
        super().__init__(message or self.error_code.name)

    @property
    def message(self) -> str:
        return str(self)


def error_code_of(exc: BaseException) -> ErrorCode:
    """The code an exception is answered with: its ``error_code`` or UNKNOWN_SERVER_ERROR."""
    code = getattr(exc, "error_code", None)
    return code if isinstance(code, ErrorCode) else ErrorCode.unknown_server_error
