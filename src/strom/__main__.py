"""``python -m strom`` runs the ``strom`` command-line tool."""

from strom.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
