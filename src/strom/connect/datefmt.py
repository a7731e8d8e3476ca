"""Java date patterns (``SimpleDateFormat`` / Joda ``DateTimeFormat``) for Connect configs.

Kafka's TimestampConverter (``format``), TimestampRouter (``timestamp.format``) and Confluent's
time-based partitioner (``path.format``) take Java patterns such as ``yyyyMMdd`` or
``'year'=YYYY/'month'=MM``. This module turns the common letters into ``strftime`` /
``strptime`` directives: ``y``/``Y`` (year), ``M`` (month: ``MM`` number, ``MMM`` short name,
``MMMM`` full name), ``d``, ``H``, ``h``, ``m``, ``s``, ``S`` (milliseconds: ``SSS``),
``a``, ``E``, ``D`` (day of year), ``Z``/``X`` (offset), ``'quoted literals'`` (``''`` is a
quote). Other letters are refused with a message naming them; everything else is literal.
Times are milliseconds since the epoch; formatting happens in UTC unless a zone is given.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

_DIRECTIVES: dict[str, dict[int, str]] = {
    "y": {1: "%Y", 2: "%y", 3: "%Y", 4: "%Y"},
    "Y": {1: "%Y", 2: "%y", 3: "%Y", 4: "%Y"},
    "M": {1: "%m", 2: "%m", 3: "%b", 4: "%B"},
    "d": {1: "%d", 2: "%d"},
    "H": {1: "%H", 2: "%H"},
    "h": {1: "%I", 2: "%I"},
    "m": {1: "%M", 2: "%M"},
    "s": {1: "%S", 2: "%S"},
    "S": {1: "%f", 2: "%f", 3: "%f"},
    "a": {1: "%p"},
    "E": {1: "%a", 2: "%a", 3: "%a", 4: "%A"},
    "D": {1: "%j", 2: "%j", 3: "%j"},
    "Z": {1: "%z", 2: "%z", 3: "%z"},
    "X": {1: "%z", 2: "%z", 3: "%z"},
}


class PatternError(ValueError):
    pass


def to_strftime(pattern: str) -> str:
    """The ``strftime`` format of a Java pattern; :class:`PatternError` for unknown letters."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            end = pattern.find("'", i + 1)
            if end == i + 1:  # '' is one quote
                out.append("'")
                i += 2
                continue
            if end < 0:
                raise PatternError(f"Unterminated quote in pattern {pattern!r}")
            out.append(pattern[i + 1:end].replace("%", "%%"))
            i = end + 1
            continue
        if ch.isalpha():
            run = 1
            while i + run < len(pattern) and pattern[i + run] == ch:
                run += 1
            table = _DIRECTIVES.get(ch)
            if table is None:
                raise PatternError(f"Illegal pattern character '{ch}' in {pattern!r}")
            out.append(table.get(run, table[max(table)]))
            i += run
            continue
        out.append("%%" if ch == "%" else ch)
        i += 1
    return "".join(out)


def format_ms(pattern: str, ms: int, tz: tzinfo = UTC) -> str:
    """``ms`` since the epoch rendered with a Java pattern (``S`` gives milliseconds)."""
    fmt = to_strftime(pattern)
    moment = datetime.fromtimestamp(ms / 1000.0, tz)
    if "%f" in fmt:
        fmt = fmt.replace("%f", f"{ms % 1000:03d}")
    return moment.strftime(fmt)


def parse_ms(pattern: str, text: str, tz: tzinfo = UTC) -> int:
    """Milliseconds since the epoch of ``text`` read with a Java pattern (ValueError if not)."""
    moment = datetime.strptime(text, to_strftime(pattern))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return int(round(moment.timestamp() * 1000))
