"""Errors of the ``strom`` CLI.

Every failure a user can cause (bad input, unreachable broker, an error the broker returns)
is an :class:`~strom.admin.errors.AdminError` (from the admin layer) or a :class:`CliError`
(from the command line itself, with its own exit code); :func:`strom.cli.main.main` prints
either as a single line on stderr and exits non-zero. No traceback reaches the user unless
``-vv`` is given.
"""

from __future__ import annotations

from strom.admin.errors import AdminError


class CliError(AdminError):
    """A failure to report as one line on stderr, with an exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def exit_code(exc: AdminError) -> int:
    """The exit status of a failure (1 unless a :class:`CliError` says otherwise)."""
    return exc.exit_code if isinstance(exc, CliError) else 1
