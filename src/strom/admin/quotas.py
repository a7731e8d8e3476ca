"""Client quotas, as ``kafka-configs.sh --entity-type users|clients``: describe the quota
entities a filter matches, set and remove quota keys (DescribeClientQuotas 48,
AlterClientQuotas 49: librdkafka offers neither, so both go with strom's own codec, on one
connection to the first bootstrap server; any broker answers, and applies a change on every
broker through the metadata store).

An entity is given as :class:`Target`: a user (a name, or ``None`` with ``default_user`` for
the default user), a client id (likewise), or both. Values are numbers (``producer_byte_rate``
and ``consumer_byte_rate`` bytes per second, whole; ``request_percentage`` percent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strom.admin import wire
from strom.admin.errors import InvalidInputError, RefusedError
from strom.admin.session import Session

DESCRIBE, ALTER, VERSION = 48, 49, 1
USER, CLIENT_ID = "user", "client-id"
EXACT, DEFAULT, ANY = 0, 1, 2
KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
        "controller_mutation_rate")  # fmt: skip


@dataclass(frozen=True)
class Target:
    """A quota entity, or with :func:`describe` a filter (a component left out: any)."""

    user: str | None = None
    default_user: bool = False
    client: str | None = None
    default_client: bool = False

    def components(self) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = []
        if self.user is not None or self.default_user:
            out.append((USER, None if self.default_user else self.user))
        if self.client is not None or self.default_client:
            out.append((CLIENT_ID, None if self.default_client else self.client))
        return out


@dataclass(frozen=True)
class QuotaEntry:
    """One entity's quotas: ``user`` / ``client_id`` are names, ``"<default>"`` for the
    default, None when the entity has no such component."""

    user: str | None
    client_id: str | None
    values: dict[str, float] = field(default_factory=dict)

    def title(self) -> str:
        """As kafka-configs prints it: ``user-principal 'alice', client-id 'app'``."""
        parts = []
        if self.user is not None:
            parts.append("the default user-principal" if self.user == "<default>"
                         else f"user-principal '{self.user}'")  # fmt: skip
        if self.client_id is not None:
            parts.append("the default client-id" if self.client_id == "<default>"
                         else f"client-id '{self.client_id}'")  # fmt: skip
        return ", ".join(parts)


def _name(name: str | None) -> str:
    return "<default>" if name is None else name


def describe(session: Session, target: Target = Target()) -> list[QuotaEntry]:
    """The entities matching ``target`` (nothing given: every entity); with a component
    given, only entities of exactly the components given (kafka-configs' strict filter)."""
    components = tuple(
        wire.part(DESCRIBE, VERSION, "ComponentData", entity_type=kind,
                  match_type=DEFAULT if name is None else EXACT, match=name)
        for kind, name in target.components()
    )  # fmt: skip
    response = wire.request(session.bootstrap, DESCRIBE, VERSION, wait_s=session.timeout,
                            components=components, strict=bool(components))  # fmt: skip
    if int(response.error_code):
        name = wire.error_name(response.error_code)
        raise RefusedError(f"cannot describe client quotas: {response.error_message or name} "
                           f"({name})")  # fmt: skip
    out = []
    for entry in response.entries or ():
        names = {e.entity_type: _name(e.entity_name) for e in entry.entity}
        out.append(QuotaEntry(names.get(USER), names.get(CLIENT_ID),
                              {v.key: float(v.value) for v in entry.values}))  # fmt: skip
    return out


def entry_title(target: Target) -> str:
    """The title of the entity ``target`` names (:meth:`QuotaEntry.title`)."""
    named = dict(target.components())
    user = _name(named[USER]) if USER in named else None
    client = _name(named[CLIENT_ID]) if CLIENT_ID in named else None
    return QuotaEntry(user, client).title()


def parse_values(text: str) -> dict[str, float]:
    """``producer_byte_rate=1024,consumer_byte_rate=2048`` (kafka-configs' --add-config)."""
    out: dict[str, float] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidInputError(f"expected KEY=VALUE, got {item!r}")
        try:
            out[key] = float(value)
        except ValueError:
            raise InvalidInputError(f"{key}: {value.strip()!r} is not a number") from None
    return out


def alter(session: Session, target: Target, sets: dict[str, float], deletes: list[str],
          validate_only: bool = False) -> str:  # fmt: skip
    """Set ``sets`` and remove ``deletes`` on the entity ``target``; its title. A refusal is
    a :class:`RefusedError` with the broker's message."""
    components = target.components()
    if not components:
        raise InvalidInputError("name a user (--user, --user-defaults), a client id "
                                "(--client, --client-defaults) or both")  # fmt: skip
    if not sets and not deletes:
        raise InvalidInputError("nothing to change: give --add-config or --delete-config")
    both = set(sets) & set(deletes)
    if both:
        raise InvalidInputError(f"both set and deleted: {', '.join(sorted(both))}")
    ops: list[Any] = [wire.part(ALTER, VERSION, "OpData", key=k, value=v, remove=False)
                      for k, v in sets.items()]  # fmt: skip
    ops += [wire.part(ALTER, VERSION, "OpData", key=k, value=0.0, remove=True) for k in deletes]
    entity = tuple(wire.part(ALTER, VERSION, "EntityData", entity_type=kind, entity_name=name)
                   for kind, name in components)  # fmt: skip
    entry = wire.part(ALTER, VERSION, "EntryData", entity=entity, ops=tuple(ops))
    response = wire.request(session.bootstrap, ALTER, VERSION, wait_s=session.timeout,
                            entries=(entry,), validate_only=validate_only)  # fmt: skip
    title = entry_title(target)
    for result in response.entries:
        if int(result.error_code):
            name = wire.error_name(result.error_code)
            raise RefusedError(f"cannot alter the quotas of {title}: "
                               f"{result.error_message or name} ({name})")  # fmt: skip
    return title
