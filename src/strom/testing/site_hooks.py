"""Test-only hooks installed in broker processes at start-up, through ``sitecustomize``.

A fault test that must act inside a real broker process (make its disk fail or stall,
:mod:`strom.testing.diskfault`; step its wall clock, :mod:`strom.testing.clockjump`) starts
the broker with a directory holding the ``sitecustomize`` module below first on its
``PYTHONPATH`` (:func:`site_dir`), plus the hook's variable naming its control directory.
Python imports ``sitecustomize`` before anything else, and it installs the hooks the
environment names. strom itself never imports these modules: a broker started without the
variables runs untouched.
"""

from __future__ import annotations

import os
from pathlib import Path

DISK_ENV = "STROM_DISK_FAULTS"
CLOCK_ENV = "STROM_CLOCK_JUMP"
_SITE = """\
import os

if os.environ.get("STROM_DISK_FAULTS"):
    from strom.testing import diskfault

    diskfault.install(os.environ["STROM_DISK_FAULTS"])
if os.environ.get("STROM_CLOCK_JUMP"):
    from strom.testing import clockjump

    clockjump.install(os.environ["STROM_CLOCK_JUMP"])
"""


def site_dir(parent: Path) -> Path:
    """A directory under ``parent`` holding the ``sitecustomize`` that installs the hooks."""
    path = parent / "site"
    path.mkdir(parents=True, exist_ok=True)
    (path / "sitecustomize.py").write_text(_SITE)
    return path


def environment(parent: Path, variable: str, control_dir: Path) -> dict[str, str]:
    """The variables of a broker that takes one hook's faults from ``control_dir``."""
    entries = [str(site_dir(parent))]
    if os.environ.get("PYTHONPATH"):
        entries.append(os.environ["PYTHONPATH"])
    return {variable: str(control_dir), "PYTHONPATH": os.pathsep.join(entries)}

