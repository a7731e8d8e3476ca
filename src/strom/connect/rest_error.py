"""The error every Connect REST operation raises: an HTTP status and Kafka Connect's message,
rendered by :mod:`strom.connect.rest` as ``{"error_code": status, "message": ...}``."""

from __future__ import annotations


class RestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
