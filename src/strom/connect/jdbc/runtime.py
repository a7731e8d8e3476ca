"""What the JDBC connectors need once they run: SQLAlchemy (the ``jdbc`` extra) and the tasks.

The connector classes (:mod:`strom.connect.jdbc`) are listed by every worker's plugin registry,
which must load without the extra; this module is imported by them only when a JDBC
connector starts, in one place (:func:`strom.connect.jdbc.runtime_modules`).
"""

from __future__ import annotations

from sqlalchemy import inspect

from strom.connect.jdbc.db import connect
from strom.connect.jdbc.sink import JdbcSinkTask
from strom.connect.jdbc.source import JdbcSourceTask

__all__ = ["JdbcSinkTask", "JdbcSourceTask", "connect", "inspect"]
