"""SCRAM credentials in the metadata store, and the view of them every broker keeps.

On-disk (in the store) format, Kafka's own: the user's entity config node
``/config/users/<sanitized user>`` (:mod:`strom.metadata.entity_configs`) holds one key per
SCRAM mechanism the user has, ``"SCRAM-SHA-256": "salt=<b64>,stored_key=<b64>,
server_key=<b64>,iterations=<n>"``, beside whatever other keys (client quotas) the node has,
which every write here keeps. The password is never stored, nor the salted password.

:class:`ScramCredentials` is the broker's service: a cache of every user's credentials kept
current by watches on ``/config/users`` and on each user's node (re-read in full after a lost
store session), so a login looks its credential up without I/O; and the two admin operations,
with Kafka's rules and error messages (``ZkAdminManager``): :meth:`describe`
(DescribeUserScramCredentials) and :meth:`alter` (AlterUserScramCredentials). A write updates
this broker's cache before it returns (read-your-writes); other brokers follow their watches.

:func:`alter_offline` is the same write with no broker running (``strom user create
--data-dir``; Kafka's ``kafka-storage format --add-scram``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from strom.metadata import entity_configs
from strom.metadata.entity_configs import USERS, USERS_PATH
from strom.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    SessionState,
    StoreError,
    WatchEvent,
)
from strom.metadata.watch_tasks import WatchTasks
from strom.protocol.errors import ErrorCode
from strom.security.sasl.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    CredentialError,
    ScramCredential,
    credential_from_salted,
    mechanism_of_type,
    salted_password,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int  # Kafka's type byte: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class UserResult:
    user: str
    error: ErrorCode
    message: str | None
    #: (mechanism type byte, iterations) of each credential (describe)
    credentials: tuple[tuple[int, int], ...] = ()


def credentials_of(config: dict[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials among a user node's keys (unparsable ones logged and left out)."""
    out: dict[str, ScramCredential] = {}
    for mechanism in MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = ScramCredential.from_string(text)
        except CredentialError as exc:
            log.error("SCRAM credential %s unreadable: %s", mechanism, exc)
    return out


def validate(upsertions: Sequence[Upsertion], deletions: Sequence[Deletion],
             ) -> tuple[list[UserResult], list[str]]:  # fmt: skip
    """Kafka's checks before any write: the failed users' results, and the users to alter.

    An empty name, an unknown mechanism, iterations outside 4096..16384 fail that user
    (UNACCEPTABLE_CREDENTIAL / UNSUPPORTED_SASL_MECHANISM); a (user, mechanism) altered twice
    fails the user (DUPLICATE_RESOURCE)."""
    failed: dict[str, UserResult] = {}
    for d in deletions:
        if not d.user:
            failed[d.user] = UserResult(d.user, ErrorCode.unacceptable_credential,
                                        "Username must not be empty")  # fmt: skip
        elif mechanism_of_type(d.mechanism) is None:
            failed[d.user] = UserResult(d.user, ErrorCode.unsupported_sasl_mechanism,
                                        "Unknown SCRAM mechanism")  # fmt: skip
    for u in upsertions:
        if not u.user:
            failed[u.user] = UserResult(u.user, ErrorCode.unacceptable_credential,
                                        "Username must not be empty")  # fmt: skip
        elif mechanism_of_type(u.mechanism) is None:
            failed[u.user] = UserResult(u.user, ErrorCode.unsupported_sasl_mechanism,
                                        "Unknown SCRAM mechanism")  # fmt: skip
        elif u.iterations < MIN_ITERATIONS or u.iterations > MAX_ITERATIONS:
            message = "Too many iterations" if u.iterations > MAX_ITERATIONS else "Too few iterations"
            failed[u.user] = UserResult(u.user, ErrorCode.unacceptable_credential, message)
    pairs = [(x.user, x.mechanism) for x in upsertions if x.user not in failed]
    pairs += [(x.user, x.mechanism) for x in deletions if x.user not in failed]
    seen: set[tuple[str, int]] = set()
    for pair in pairs:
        if pair in seen and pair[0] not in failed:
            failed[pair[0]] = UserResult(pair[0], ErrorCode.duplicate_resource,
                                         "A user credential cannot be altered twice in the same "
                                         "request")  # fmt: skip
        seen.add(pair)
    users = list(dict.fromkeys(user for user, _ in pairs if user not in failed))
    return list(failed.values()), users


def _changer(user: str, upsertions: Sequence[Upsertion], deletions: Sequence[Deletion]) -> Any:
    """The read-modify-write of one user's node: only the SCRAM keys named change."""

    def change(config: dict[str, str]) -> dict[str, str]:
        for d in deletions:
            if d.user == user:
                name = mechanism_of_type(d.mechanism)
                if name not in config:
                    raise LookupError("Attempt to delete a user credential that does not exist")
                del config[name]
        for u in upsertions:
            if u.user == user:
                name = mechanism_of_type(u.mechanism)
                assert name is not None
                credential = credential_from_salted(name, u.salt, u.salted_password,
                                                    u.iterations)  # fmt: skip
                config[name] = credential.to_string()
        return config

    return change


async def alter_in_store(store: MetadataStore, upsertions: Sequence[Upsertion],
                         deletions: Sequence[Deletion]) -> list[UserResult]:  # fmt: skip
    """AlterUserScramCredentials against a store: one result per user, Kafka's errors."""
    results, users = validate(upsertions, deletions)
    for user in users:
        try:
            await entity_configs.update(store, USERS, user, _changer(user, upsertions, deletions))
        except LookupError as exc:
            results.append(UserResult(user, ErrorCode.resource_not_found, str(exc)))
        except (StoreError, entity_configs.ConcurrentChangeError, ValueError) as exc:
            log.warning("altering SCRAM credentials of %r failed: %s", user, exc)
            results.append(UserResult(user, ErrorCode.unknown_server_error, str(exc)))
        else:
            results.append(UserResult(user, ErrorCode.none, None))
    return results


async def describe_in_store(store: MetadataStore, users: Sequence[str] | None,
                            ) -> list[UserResult]:  # fmt: skip
    """DescribeUserScramCredentials: every user with a credential (sorted) when ``users`` is
    None or empty, else each named user once, Kafka's errors for empty, repeated and unknown
    names."""
    if not users:
        everyone = await entity_configs.read_all(store, USERS)
        return [_described(user, config) for user, config in sorted(everyone.items())
                if credentials_of(config)]  # fmt: skip
    results: dict[str, UserResult] = {}
    repeated = {u for u in users if users.count(u) > 1}
    for user in dict.fromkeys(users):
        if not user:
            results[user] = UserResult(user, ErrorCode.resource_not_found,
                                       "Username must not be empty")  # fmt: skip
        elif user in repeated:
            results[user] = UserResult(
                user, ErrorCode.duplicate_resource,
                f"Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {user}")  # fmt: skip
        else:
            try:
                config = await entity_configs.read(store, USERS, user)
            except (StoreError, ValueError) as exc:
                results[user] = UserResult(user, ErrorCode.unknown_server_error, str(exc))
                continue
            if credentials_of(config):
                results[user] = _described(user, config)
            else:
                results[user] = UserResult(
                    user, ErrorCode.resource_not_found,
                    f"Attempt to describe a user credential that does not exist: {user}")
    return list(results.values())


def _described(user: str, config: dict[str, str]) -> UserResult:
    credentials = credentials_of(config)
    infos = tuple((MECHANISMS[name][1], c.iterations) for name, c in credentials.items())
    return UserResult(user, ErrorCode.none, None, infos)


class ScramCredentials:
    """The broker's SCRAM credentials: a watched cache for logins, and the admin operations."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._watched: set[str] = set()  # node names with a data watch armed
        self._background = WatchTasks("SCRAM credentials")  # re-reads started by watches
        self._lost = False

    async def start(self) -> None:
        self._store.add_session_listener(self._on_session)
        with contextlib.suppress(NodeExistsError):
            await self._store.create(USERS_PATH)
        await self._read_all()

    async def close(self) -> None:
        await self._background.close()

    def lookup(self, mechanism: str, user: str) -> ScramCredential | None:
        """The user's credential of ``mechanism``, None if none (no I/O: a login's lookup)."""
        found = self._users.get(user)
        return None if found is None else found.get(mechanism)

    def users(self) -> list[str]:
        return sorted(self._users)

    async def alter(self, upsertions: Sequence[Upsertion],
                    deletions: Sequence[Deletion]) -> list[UserResult]:  # fmt: skip
        results = await alter_in_store(self._store, upsertions, deletions)
        for result in results:
            if result.error == ErrorCode.none:
                await self._read_user(entity_configs.sanitize(result.user), watch=False)
        return results

    async def describe(self, users: Sequence[str] | None) -> list[UserResult]:
        return await describe_in_store(self._store, users)

    # the cache ------------------------------------------------------------------------------
    async def _read_all(self) -> None:
        try:
            nodes = await self._store.children(USERS_PATH, watch=self._on_children)
        except NoNodeError:
            nodes = []
        gone = set(self._users) - {entity_configs.desanitize(n) for n in nodes}
        for user in gone:
            self._users.pop(user, None)
        fresh = [n for n in nodes if n not in self._watched]
        await asyncio.gather(*(self._read_user(n) for n in fresh))

    async def _read_user(self, node: str, watch: bool = True) -> None:
        arm = watch and node not in self._watched
        if arm:
            self._watched.add(node)
        user = entity_configs.desanitize(node)
        try:
            data, _ = await self._store.get(f"{USERS_PATH}/{node}",
                                            watch=self._on_user if arm else None)  # fmt: skip
        except NoNodeError:
            self._users.pop(user, None)
            self._watched.discard(node)
            return
        except BaseException:
            if arm:
                self._watched.discard(node)
            raise
        try:
            credentials = credentials_of(entity_configs.parse_document(data))
        except ValueError as exc:
            log.error("user %r: unreadable config node: %s", user, exc)
            credentials = {}
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)

    def _on_children(self, event: WatchEvent) -> None:
        self._background.spawn(self._read_all())

    def _on_user(self, event: WatchEvent) -> None:
        node = event.path.rsplit("/", 1)[1]
        self._watched.discard(node)
        self._background.spawn(self._read_user(node))

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self._lost = True
            self._watched.clear()
        elif state is SessionState.CONNECTED and self._lost:
            self._lost = False
            self._background.spawn(self._read_all())



def upsertion(user: str, mechanism: str, password: str, iterations: int,
              salt: bytes | None = None) -> Upsertion:  # fmt: skip
    """An upsertion made from a password here (the offline path: what a client computes)."""
    salt = os.urandom(32) if salt is None else salt
    return Upsertion(user, MECHANISMS[mechanism][1], iterations, salt,
                     salted_password(mechanism, password, salt, iterations))  # fmt: skip
