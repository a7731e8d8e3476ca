"""SCRAM users: create (or change the password of), list, delete — through the broker's
AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554) via confluent-kafka.

librdkafka computes the salted password on the client (PBKDF2 of the password with a random
salt and the iteration count), so the password itself never crosses the network; the broker
keeps only Kafka's StoredKey / ServerKey. A refusal (too few iterations, an unknown user …)
is one :class:`~strom.admin.errors.AdminError` sentence with the broker's message.

The offline bootstrap of the first user (no broker running) is
:func:`strom.security.scram_credentials.alter_offline`, used by ``strom user create
--data-dir``.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from strom.admin.errors import InvalidInputError, NotFoundError, RefusedError, describe_kafka_error
from strom.admin.session import Session

MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}  # fmt: skip
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True)
class UserCredentials:
    user: str
    #: (mechanism name, iterations), sorted
    credentials: tuple[tuple[str, int], ...]


def mechanism_of(name: str) -> ScramMechanism:
    try:
        return MECHANISMS[name.upper()]
    except KeyError:
        raise InvalidInputError(f"unknown SCRAM mechanism {name!r}: expected "
                                f"{' or '.join(MECHANISMS)}") from None  # fmt: skip


def _name(mechanism: ScramMechanism) -> str:
    return {v: k for k, v in MECHANISMS.items()}.get(mechanism, str(mechanism))


def _refusal(what: str, exc: BaseException) -> RefusedError:
    return RefusedError(f"{what}: {describe_kafka_error(exc)}")


def create(session: Session, user: str, password: str, mechanisms: list[str],
           iterations: int = DEFAULT_ITERATIONS) -> None:  # fmt: skip
    """Create the user's credentials (or replace them: a new password) for each mechanism."""
    if not user:
        raise InvalidInputError("a user name must not be empty")
    if not password:
        raise InvalidInputError("a password must not be empty")
    alterations: list[UserScramCredentialAlteration] = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism_of(m),
                                                                          iterations),
                                                password.encode("utf-8"))
                   for m in mechanisms]  # fmt: skip
    futures = session.guarded("alter SCRAM credentials",
                              lambda: session.admin.alter_user_scram_credentials(alterations))  # fmt: skip
    for name, future in futures.items():
        try:
            future.result(timeout=session.timeout + 1)
        except KafkaException as exc:
            raise _refusal(f"user {name}", exc) from None


def delete(session: Session, user: str, mechanisms: list[str] | None = None) -> list[str]:
    """Delete the user's credentials (every mechanism it has unless named); the mechanisms
    deleted. NotFoundError when the user has none."""
    if mechanisms is None:
        found = {u.user: u for u in describe(session, [user])}
        if user not in found:
            raise NotFoundError(f"user {user!r} has no SCRAM credentials")
        mechanisms = [m for m, _ in found[user].credentials]
    alterations: list[UserScramCredentialAlteration] = [UserScramCredentialDeletion(user, mechanism_of(m)) for m in mechanisms]
    futures = session.guarded("delete SCRAM credentials",
                              lambda: session.admin.alter_user_scram_credentials(alterations))  # fmt: skip
    for name, future in futures.items():
        try:
            future.result(timeout=session.timeout + 1)
        except KafkaException as exc:
            raise _refusal(f"user {name}", exc) from None
    return mechanisms


def describe(session: Session, users: list[str] | None = None) -> list[UserCredentials]:
    """The SCRAM credentials (mechanism, iterations) of the named users, or of every user;
    a named user without credentials is left out."""
    result = session.guarded("describe SCRAM credentials",
                             lambda: session.admin.describe_user_scram_credentials(users))  # fmt: skip
    found: dict[str, object] = {}
    if isinstance(result, dict):  # named users: a future each
        for name, future in result.items():
            try:
                found[name] = future.result(timeout=session.timeout + 1)
            except KafkaException as exc:
                text = describe_kafka_error(exc)
                if "RESOURCE_NOT_FOUND" in text or "does not exist" in text:
                    continue
                raise _refusal(f"user {name}", exc) from None
    else:
        found = dict(session.wait(result, "describe SCRAM credentials"))
    out = []
    for name, description in sorted(found.items()):
        infos = getattr(description, "scram_credential_infos", [])
        out.append(UserCredentials(name, tuple(sorted((_name(i.mechanism), int(i.iterations))
                                                      for i in infos))))  # fmt: skip
    return out
