"""Kafka's JAAS configuration strings (``sasl.jaas.config``), parsed without Java.

Syntax (Kafka's ``JaasConfig``, one or more entries)::

    <LoginModule class> <required|requisite|sufficient|optional> [key=value ...];

Values are bare words or double-quoted strings (``\\"`` and ``\\\\`` escaped inside); a
``//`` or ``/* */`` comment is ignored, as Java's ``StreamTokenizer`` does. The PLAIN server
reads its users from ``user_<name>="<password>"`` options of
``org.apache.kafka.common.security.plain.PlainLoginModule``; the OAUTHBEARER server reads the
``unsecuredValidator*`` options of ``OAuthBearerLoginModule``; the broker's own client side
(inter-broker SASL) reads ``username``/``password``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r"""\s*(?:(//[^\n]*|/\*.*?\*/)|("(?:[^"\\]|\\.)*")|(=|;)|([^\s=;"]+))""",
                    re.S)  # fmt: skip


class JaasError(ValueError):
    """A JAAS configuration string that does not parse; the message says where."""


@dataclass(frozen=True)
class LoginModule:
    name: str  # the login module's class name
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text): kind ``w`` a word, ``s`` a quoted string (unescaped), ``p`` = or ;."""
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasError(f"unexpected character {text[pos:pos + 1]!r} at offset {pos}")
        pos = m.end()
        comment, quoted, punct, word = m.groups()
        if comment is not None:
            continue
        if quoted is not None:
            out.append(("s", re.sub(r"\\(.)", r"\1", quoted[1:-1], flags=re.S)))
        elif punct is not None:
            out.append(("p", punct))
        elif word is not None:
            out.append(("w", word))
    return out


def parse(text: str) -> list[LoginModule]:
    """Every login module of a ``sasl.jaas.config`` value (at least one)."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        kind, name = tokens[i]
        if kind != "w":
            raise JaasError(f"expected a login module class name, got {name!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][1] not in _FLAGS:
            raise JaasError(f"login module {name} needs a control flag ({'/'.join(_FLAGS)})")
        flag = tokens[i + 1][1]
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i] != ("p", ";"):
            key_kind, key = tokens[i]
            if key_kind == "p" or i + 2 >= len(tokens) or tokens[i + 1] != ("p", "="):
                raise JaasError(f"login module {name}: expected key=value, got {key!r}")
            value_kind, value = tokens[i + 2]
            if value_kind == "p":
                raise JaasError(f"login module {name}: option {key} has no value")
            options[key] = value
            i += 3
        if i >= len(tokens):
            raise JaasError(f"login module {name}: the entry must end with ';'")
        i += 1  # the ';'
        modules.append(LoginModule(name, flag, options))
    if not modules:
        raise JaasError("no login module")
    return modules


def module_options(text: str, module: str) -> dict[str, str]:
    """The options of ``module`` in ``text``; JaasError if it is not there."""
    for entry in parse(text):
        if entry.name == module:
            return entry.options
    names = ", ".join(entry.name for entry in parse(text))
    raise JaasError(f"expected login module {module}, got {names}")


def plain_users(text: str) -> dict[str, str]:
    """The PLAIN users of a PlainLoginModule entry: ``user_<name>="<password>"`` options."""
    options = module_options(text, PLAIN_LOGIN_MODULE)
    return {key[5:]: value for key, value in options.items() if key.startswith("user_")}
