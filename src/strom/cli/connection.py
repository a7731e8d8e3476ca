"""Where the CLI connects and how long it waits.

The broker address comes from, first found wins: ``-b/--bootstrap-server`` (before or after
the subcommand), the ``STROM_BROKERS`` environment variable, the current profile
(:mod:`strom.cli.profile_store`), then ``localhost:9092``. The wait is ``--timeout``, else the
profile's timeout (when the profile gives the address), else 10 seconds.
"""

from __future__ import annotations

import argparse
import os

from strom.admin.session import DEFAULT_TIMEOUT_S
from strom.cli.errors import CliError
from strom.cli.profile_store import current_profile

DEFAULT_BOOTSTRAP = "localhost:9092"
ENV_BROKERS = "STROM_BROKERS"


def resolve_bootstrap(args: argparse.Namespace) -> str:
    """The bootstrap list to use, recording where it came from on ``args``."""
    given = getattr(args, "bootstrap_server", None)
    if given and getattr(args, "bootstrap_source", None):
        return str(given)  # resolved already
    if given:
        args.bootstrap_source = "--bootstrap-server"
        return str(given)
    env = os.environ.get(ENV_BROKERS, "").strip()
    if env:
        args.bootstrap_source = ENV_BROKERS
        return env
    profile = current_profile(getattr(args, "profile", None))
    if profile is not None and profile.brokers:
        args.bootstrap_source = f"profile {profile.name!r}"
        return profile.brokers
    args.bootstrap_source = "default"
    return DEFAULT_BOOTSTRAP


def resolve_timeout(args: argparse.Namespace) -> float:
    """``--timeout``, else the profile's timeout (when the profile gives the address), else
    10 seconds; a :class:`CliError` unless positive."""
    seconds = getattr(args, "given_timeout", None)
    if seconds is None and str(getattr(args, "bootstrap_source", "")).startswith("profile"):
        profile = current_profile(getattr(args, "profile", None))
        seconds = profile.timeout if profile is not None else None
    if seconds is None:
        return DEFAULT_TIMEOUT_S
    if not seconds > 0:
        raise CliError(f"--timeout must be a positive number of seconds, got {seconds:g}")
    return float(seconds)
