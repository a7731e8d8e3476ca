"""``ssl.principal.mapping.rules``: a client certificate's distinguished name to a user name.

Kafka's syntax and semantics (``SslPrincipalMapper``): a comma-separated list of rules, tried
in order, the first that gives a name wins; no rule giving one refuses the connection.

- ``DEFAULT``: the DN itself (the default when the property is unset);
- ``RULE:pattern/replacement/`` or ``RULE:pattern/replacement/L`` (``/U``): when the whole DN
  matches the regular expression ``pattern``, every match of it in the DN is replaced by
  ``replacement`` (``$1`` … are groups; a group number above the pattern's groups is read
  as fewer digits, and with none left as literal text, as Kafka does), then lower- (``L``) or
  upper-cased (``U``). ``\\/`` in a pattern or replacement is a literal slash.

The DN is written as Java's ``X500Principal.getName()`` (RFC 2253: the most specific
attribute first, ``CN=…,OU=…,O=…,C=…``); :func:`distinguished_name` makes it from a
certificate's subject.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_BACKREF = re.compile(r"\$(\d+)")


class PrincipalMappingError(ValueError):
    """Rules that do not parse (the property is refused), or no rule gives a name."""


@dataclass(frozen=True, slots=True)
class Rule:
    """``DEFAULT`` (pattern None) or one ``RULE:``."""

    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(_replacer(self.replacement, self.pattern.groups), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _replacer(replacement: str, groups: int) -> Callable[[re.Match[str]], str]:
    """Java's ``Matcher.replaceAll`` replacement (``$n`` groups, ``\\x`` a literal x) after
    Kafka's rewrite of group numbers above ``groups`` into literal text."""
    parts: list[str | int] = []  # literal text, or a group number
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            parts.append(replacement[i + 1])
            i += 2
            continue
        m = _BACKREF.match(replacement, i) if c == "$" else None
        if m is None:
            parts.append(c)
            i += 1
            continue
        digits = m.group(1)
        number = int(digits)
        while number > groups and number >= 10:  # Kafka: $12 with 9 groups is $1 then "2"
            number //= 10
        if not digits.startswith("0") and number > groups:  # Kafka: no such group, literal
            parts.append("$" + digits)
            i = m.end()
            continue
        # Java: the first digit, then more digits while the number stays a group
        number, j = int(digits[0]), i + 2
        while j < m.end() and number * 10 + int(replacement[j]) <= groups:
            number = number * 10 + int(replacement[j])
            j += 1
        parts.append(number)
        i = j

    def replace(match: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (match.group(p) or "") for p in parts)

    return replace


def parse_rules(text: str | None) -> tuple[Rule, ...]:
    """The rules of ``ssl.principal.mapping.rules`` (None: ``DEFAULT``)."""
    if text is None:
        text = "DEFAULT"
    rules: list[Rule] = []
    for split in _SPLITTER.finditer(text.strip()):
        rule = split.group(1)
        m = _PARSER.match(rule)
        if m is None or m.end() != len(rule):
            unmatched = rule[m.end() :] if m is not None else rule
            raise PrincipalMappingError(
                f"ssl.principal.mapping.rules: invalid rule {rule!r}, unmatched {unmatched!r}"
            )
        if m.group(1) is not None:
            rules.append(Rule())
        elif m.group(2) is not None:
            try:
                pattern = re.compile(m.group(2))
            except re.error as exc:
                raise PrincipalMappingError(
                    f"ssl.principal.mapping.rules: invalid pattern {m.group(2)!r}: {exc}"
                ) from None
            rules.append(Rule(pattern, m.group(3), m.group(4)))
        # an empty rule is ignored
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    rules: tuple[Rule, ...]

    @classmethod
    def from_config(cls, text: str | None) -> PrincipalMapper:
        return cls(parse_rules(text))

    def name(self, dn: str) -> str:
        """The user name of ``dn``; PrincipalMappingError when no rule gives one."""
        for rule in self.rules:
            found = rule.apply(dn)
            if found is not None:
                return found
        raise PrincipalMappingError(f"no ssl.principal.mapping.rules rule applies to {dn!r}")


def distinguished_name(der_certificate: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` writes it
    (RFC 2253; ``cryptography``'s RFC 4514 string has the same attribute keywords and order)."""
    from cryptography import x509  # only when a client presents a certificate

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()
