"""``python -m strom`` runs the ``strom`` command-line tool.

Run this way, the process is strom's alone (a broker, a Connect worker, one CLI command), so
it refuses to import ``hypothesis`` before anything else is imported: kio imports it at its own
import, when it is installed (a test dependency), to register strategies for its types, and
that cost every ``python -m strom`` process ~0.3-0.5 s of CPU at start on a machine with the
test extras: the test suite starts such processes by the thousand. Nothing strom runs uses it.
Imported as a module (``strom.__main__``), nothing changes.
"""

import sys

if __name__ == "__main__":
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]  # import -> ImportError

from strom.cli.main import main  # noqa: E402 - after the line above, by design

if __name__ == "__main__":
    raise SystemExit(main())
