"""strom's web console (``strom console``): overview, topics, messages, groups, connectors.

A client on top of the cluster like the CLI (both stand on :mod:`strom.admin`; neither imports
the other) served by Starlette + uvicorn with Jinja2 pages and local static assets. Importing
this package imports no web framework; :mod:`strom.console.app` does. Modules:
:mod:`~strom.console.cluster` (admin reads and writes), :mod:`~strom.console.messages` (the
message browser), :mod:`~strom.console.throughput` (the sparkline's sampler),
:mod:`~strom.console.connectors` (Connect REST), ``routes_*`` (pages), :mod:`~strom.console.app`
(the application, read-only guard), :mod:`~strom.console.server` (serving it),
:mod:`~strom.console.command` (the ``strom console`` command line).
"""
