"""SCRAM credentials in both metadata stores, in Kafka's ``/config/users/<user>`` format:
Kafka's AlterUserScramCredentials / DescribeUserScramCredentials rules, keys of other owners
(quotas) kept, the watched cache of a second session following a write, survival of a
reopened embedded store."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import scramp

from strom.metadata import entity_configs
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.store import MetadataStore
from strom.metadata.zookeeper import ZooKeeperStore
from strom.protocol.errors import ErrorCode
from strom.security.sasl.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramServer, salted_password
from strom.security.scram_credentials import (
    Deletion,
    ScramCredentials,
    Upsertion,
    alter_in_store,
    describe_in_store,
)
from strom.testing.zookeeper import ZooKeeperProcess, zookeeper_available

needs_zk = pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper")
SALT = b"0123456789abcdef0123456789abcdef"


def upsert(user: str, password: str, mechanism: int = 1, iterations: int = 4096) -> Upsertion:
    name = SCRAM_SHA_256 if mechanism == 1 else SCRAM_SHA_512
    return Upsertion(user, mechanism, iterations, SALT,
                     salted_password(name, password, SALT, iterations) if mechanism in (1, 2)
                     else b"x")  # fmt: skip


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zk"))
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture(params=["embedded", pytest.param("zookeeper", marks=needs_zk)])
def make_store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "embedded":
        return lambda: EmbeddedStore(tmp_path)
    zk: ZooKeeperProcess = request.getfixturevalue("zookeeper")
    connect = f"{zk.connect_string}/scram-{uuid.uuid4().hex[:8]}"
    return lambda: ZooKeeperStore(connect, session_timeout_ms=4000, connection_timeout_ms=10_000)


def login(credentials: ScramCredentials, mechanism: str, user: str, password: str) -> bool:
    client = scramp.ScramClient([mechanism], user, password)
    server = ScramServer(mechanism, lambda name: credentials.lookup(mechanism, name))
    try:
        first = server.evaluate(client.get_client_first().encode())
        client.set_server_first(first.decode())
        client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
    except Exception:
        return False
    return server.complete


def test_alter_describe_kafka_rules_and_node_format(make_store) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        store: MetadataStore = make_store()
        await store.start()
        try:
            # a quota key of another owner is already in alice's node: it must stay
            await entity_configs.update(store, "users", "alice",
                                        lambda c: {**c, "producer_byte_rate": "1024"})  # fmt: skip
            results = await alter_in_store(store, [
                upsert("alice", "pw-a"), upsert("alice", "pw-a5", mechanism=2, iterations=8192),
                upsert("bob", "pw-b", iterations=100),          # too few
                upsert("carol", "pw-c", iterations=20000),     # too many
                upsert("dave", "pw-d", mechanism=7),           # unknown mechanism
                upsert("", "pw"),                              # empty name
                upsert("erin", "x"), upsert("erin", "y"),      # twice the same mechanism
            ], [Deletion("frank", 1)])                         # nothing to delete
            by_user = {r.user: (r.error, r.message) for r in results}
            assert by_user == {
                "alice": (ErrorCode.none, None),
                "bob": (ErrorCode.unacceptable_credential, "Too few iterations"),
                "carol": (ErrorCode.unacceptable_credential, "Too many iterations"),
                "dave": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
                "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
                "erin": (ErrorCode.duplicate_resource,
                         "A user credential cannot be altered twice in the same request"),
                "frank": (ErrorCode.resource_not_found,
                          "Attempt to delete a user credential that does not exist"),
            }
            data, _ = await store.get("/config/users/alice")
            doc = json.loads(data)
            assert doc["version"] == 1
            assert doc["config"]["producer_byte_rate"] == "1024"
            assert set(doc["config"]) == {"producer_byte_rate", "SCRAM-SHA-256", "SCRAM-SHA-512"}
            assert doc["config"]["SCRAM-SHA-512"].endswith(",iterations=8192")
            assert "pw-a" not in data.decode()
            # each write (the quota's, the credentials') announced for Kafka's brokers, as
            # Kafka's AdminZkClient.changeConfigs does; the refused users wrote nothing
            notes = [json.loads((await store.get(f"/config/changes/{node}"))[0])
                     for node in await store.children("/config/changes")]  # fmt: skip
            assert notes == [{"version": 2, "entity_path": "users/alice"}] * 2

            described = await describe_in_store(store, None)
            assert [(r.user, sorted(r.credentials)) for r in described] == [
                ("alice", [(1, 4096), (2, 8192)])]
            named = await describe_in_store(store, ["alice", "nobody", "alice2", "alice2", ""])
            assert [(r.user, r.error) for r in named] == [
                ("alice", ErrorCode.none), ("nobody", ErrorCode.resource_not_found),
                ("alice2", ErrorCode.duplicate_resource), ("", ErrorCode.resource_not_found)]

            results = await alter_in_store(store, [], [Deletion("alice", 1), Deletion("alice", 2)])
            assert [(r.user, r.error) for r in results] == [("alice", ErrorCode.none)]
            assert len(await store.children("/config/changes")) == 3
            config = await entity_configs.read(store, "users", "alice")
            assert config == {"producer_byte_rate": "1024"}
        finally:
            await store.close()

    asyncio.run(main())


def test_cache_follows_writes_and_logins_check_them(make_store) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        store: MetadataStore = make_store()
        await store.start()
        credentials = ScramCredentials(store)
        await credentials.start()
        try:
            assert not login(credentials, SCRAM_SHA_256, "a b/c", "pw1")
            await credentials.alter([upsert("a b/c", "pw1")], [])
            assert login(credentials, SCRAM_SHA_256, "a b/c", "pw1")  # read-your-writes
            assert not login(credentials, SCRAM_SHA_256, "a b/c", "pw2")
            assert (await store.children("/config/users")) == ["a%20b%2Fc"]
            # a write made elsewhere (another broker, the offline CLI): the watch brings it
            await alter_in_store(store, [upsert("a b/c", "pw2")], [])
            for _ in range(200):
                if login(credentials, SCRAM_SHA_256, "a b/c", "pw2"):
                    break
                await asyncio.sleep(0.02)
            assert login(credentials, SCRAM_SHA_256, "a b/c", "pw2")
            assert not login(credentials, SCRAM_SHA_256, "a b/c", "pw1")
            await alter_in_store(store, [upsert("zed", "pz", mechanism=2)], [])
            for _ in range(200):
                if credentials.lookup(SCRAM_SHA_512, "zed") is not None:
                    break
                await asyncio.sleep(0.02)
            assert login(credentials, SCRAM_SHA_512, "zed", "pz")
            await alter_in_store(store, [], [Deletion("zed", 2)])
            for _ in range(200):
                if credentials.lookup(SCRAM_SHA_512, "zed") is None:
                    break
                await asyncio.sleep(0.02)
            assert credentials.lookup(SCRAM_SHA_512, "zed") is None
        finally:
            await credentials.close()
            await store.close()

    asyncio.run(main())


def test_embedded_credentials_survive_reopen(tmp_path: Path) -> None:
    async def main() -> None:
        store = EmbeddedStore(tmp_path)
        await store.start()
        await alter_in_store(store, [upsert("alice", "pw")], [])
        await store.close()
        store = EmbeddedStore(tmp_path)
        await store.start()
        credentials = ScramCredentials(store)
        await credentials.start()
        try:
            assert login(credentials, SCRAM_SHA_256, "alice", "pw")
        finally:
            await credentials.close()
            await store.close()

    asyncio.run(main())
