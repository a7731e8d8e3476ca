"""Dynamic broker configs in the metadata store (strom.broker.dynamic_config.read / write):
Kafka's node and document, and the change notification Kafka's brokers read; password configs
encrypted in it (never in the store's files), decoded at load and by the watch, refused without
a secret, ignored under a wrong one, rotated with the old secret, plain ones of an older strom
encrypted."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from pathlib import Path

import pytest

from strom.broker import dynamic_config
from strom.broker import password_encoder as pe
from strom.broker.dynamic_config import DynamicConfig
from strom.broker.node import NodeIdentity
from strom.config import BrokerConfig
from strom.metadata import journal
from strom.metadata.embedded import EmbeddedStore
from strom.metadata.store import NoNodeError
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.errors import InvalidConfigError


def test_write_is_kafkas_node_and_announces_the_change(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        try:
            await dynamic_config.write(store, "<default>", {"log.retention.ms": "1000"})
            await dynamic_config.write(store, "2", {"message.max.bytes": "2048"})
            await dynamic_config.write(store, "2", {})
            doc = json.loads((await store.get("/config/brokers/<default>"))[0])
            assert doc == {"version": 1, "config": {"log.retention.ms": "1000"}}
            assert await dynamic_config.read(store, "2") == {}
            notes = [json.loads((await store.get(f"/config/changes/{node}"))[0])
                     for node in await store.children("/config/changes")]  # fmt: skip
            assert notes == [{"version": 2, "entity_path": "brokers/<default>"},
                             {"version": 2, "entity_path": "brokers/2"},
                             {"version": 2, "entity_path": "brokers/2"}]  # fmt: skip
        finally:
            await store.close()

    asyncio.run(scenario())


# --- password configs encrypted at rest (strom.broker.password_encoder) ---------------------

PW = "listener.name.ssl.ssl.keystore.password"
SECRET, OLD = "password.encoder.secret", "password.encoder.old.secret"


def broker(store: EmbeddedStore, props: dict[str, str] | None = None,
           node_id: int = 1) -> DynamicConfig:  # fmt: skip
    """Broker ``node_id``'s dynamic configs on a real embedded store, no topics."""
    node = NodeIdentity(node_id, "c", ("localhost", 9092), ("127.0.0.1", 9092), None,
                        Path("/data"), (Path("/data"),))  # fmt: skip
    return DynamicConfig(store, BrokerConfig(props or {}), node, [])  # type: ignore[arg-type]


async def stored(store: EmbeddedStore, entity: str = "1") -> dict[str, str]:
    doc = json.loads((await store.get(f"/config/brokers/{entity}"))[0])
    assert doc["version"] == 1
    return dict(doc["config"])


def on_disk(data_dir: Path) -> bytes:
    """Every node's data as the embedded store's files hold it (decoded), and the files."""
    image = journal.load(data_dir / journal.FILE_NAME, data_dir / journal.JOURNAL_NAME)
    nodes = b"".join(base64.b64decode(n[0]) for n in image.nodes.values())
    files = b"".join(p.read_bytes() for p in data_dir.iterdir() if p.is_file())
    return nodes + files


def test_passwords_are_stored_encrypted_and_decoded_after_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        first = broker(store, {SECRET: "secret-a"})
        await first.load()
        await first.apply("1", {PW: "keystore-pass-1", "message.max.bytes": "2048"})
        assert first.config.values[PW] == "keystore-pass-1"
        raw = await stored(store)
        assert raw["message.max.bytes"] == "2048"  # the rest as before
        assert "keystore-pass-1" not in raw[PW] and pe.looks_encoded(raw[PW])
        assert pe.PasswordEncoder("secret-a").decode(raw[PW]) == "keystore-pass-1"
        await store.close()
        assert b"keystore-pass-1" not in on_disk(tmp_path)

        store = EmbeddedStore(tmp_path)  # a restart: the same secret decodes it
        again = broker(store, {SECRET: "secret-a"})
        await again.load()
        assert again.config.dynamic_broker == {PW: "keystore-pass-1", "message.max.bytes": "2048"}
        await store.close()

        store = EmbeddedStore(tmp_path)  # a wrong secret: logged and ignored, the rest applies
        caplog.clear()
        wrong = broker(store, {SECRET: "secret-b"})
        await wrong.load()
        assert wrong.config.dynamic_broker == {"message.max.bytes": "2048"}
        assert PW not in wrong.config.values
        assert f"Dynamic password config {PW} of broker entity 1 could not be decoded, " \
               "ignoring" in caplog.text
        assert (await stored(store))[PW] == raw[PW]  # left as it was
        await store.close()

        store = EmbeddedStore(tmp_path)  # rotation: old secret decodes, new one re-encodes
        caplog.clear()
        caplog.set_level(logging.INFO, "strom.broker.dynamic_config")
        rotated = broker(store, {SECRET: "secret-b", OLD: "secret-a"})
        await rotated.load()
        assert (f"dynamic password configs of broker entity 1 re-encoded with {SECRET}: {PW}"
                in caplog.text)  # fmt: skip
        assert "could not be decoded" not in caplog.text
        assert rotated.config.values[PW] == "keystore-pass-1"
        now = await stored(store)
        assert now["message.max.bytes"] == "2048"
        assert pe.PasswordEncoder("secret-b").decode(now[PW]) == "keystore-pass-1"
        with pytest.raises(pe.PasswordDecodeError):
            pe.PasswordEncoder("secret-a").decode(now[PW])
        await store.close()

        store = EmbeddedStore(tmp_path)  # the old secret gone: the new one alone decodes it
        after = broker(store, {SECRET: "secret-b"})
        await after.load()
        assert after.config.values[PW] == "keystore-pass-1"
        await store.close()

    asyncio.run(scenario())


def test_without_a_secret_a_password_is_refused_with_kafkas_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        try:
            plain = broker(store)
            await plain.load()
            for validate_only in (True, False):
                with pytest.raises(InvalidConfigError) as info:
                    if validate_only:
                        plain.validate("1", {PW: "x", "message.max.bytes": "2048"})
                    else:
                        await plain.apply("1", {PW: "x", "message.max.bytes": "2048"})
                assert info.value.error_code == ErrorCode.invalid_config
                assert str(info.value) == ("Invalid config value for resource ConfigResource("
                                           "type=BROKER, name='1'): Password encoder secret not "
                                           "configured")  # fmt: skip
            with pytest.raises(NoNodeError):
                await store.get("/config/brokers/1")  # nothing written
            assert PW not in plain.config.values
            # at the cluster default Kafka's per-broker rule answers first
            with pytest.raises(KafkaError, match="broker id must be specified"):
                plain.validate("<default>", {PW: "x"})
            await plain.apply("1", {"message.max.bytes": "2048"})  # no password: as before
            assert await stored(store) == {"message.max.bytes": "2048"}
        finally:
            await store.close()

    asyncio.run(scenario())


def test_plain_passwords_of_an_older_strom_are_read_then_encrypted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        await dynamic_config.write(store, "1", {PW: "old-plain", "message.max.bytes": "2048"})
        old = broker(store)  # no secret: read as it is, one warning
        await old.load()
        assert old.config.values[PW] == "old-plain"
        assert await old.read("1") == {PW: "old-plain", "message.max.bytes": "2048"}
        assert caplog.text.count(f"{PW} of broker entity 1 is stored in plain text") == 1
        with pytest.raises(InvalidConfigError, match="Password encoder secret not configured"):
            await old.apply("1", {PW: "old-plain", "message.max.bytes": "4096"})
        assert (await stored(store))[PW] == "old-plain"
        await store.close()

        store = EmbeddedStore(tmp_path)  # with a secret: encrypted at start-up
        new = broker(store, {SECRET: "s"})
        await new.load()
        assert new.config.dynamic_broker == {PW: "old-plain", "message.max.bytes": "2048"}
        raw = await stored(store)
        assert raw["message.max.bytes"] == "2048"
        assert pe.PasswordEncoder("s").decode(raw[PW]) == "old-plain"
        await store.close()
        assert b"old-plain" not in on_disk(tmp_path)

    asyncio.run(scenario())


def test_a_change_written_through_another_broker_is_decoded_by_the_watch(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = EmbeddedStore(tmp_path)
        try:
            one = broker(store, {SECRET: "shared"}, 1)
            two = broker(store, {SECRET: "shared"}, 2)
            await one.load()
            await two.load()
            await two.apply("1", {PW: "from-two"})
            for _ in range(200):
                if one.config.values.get(PW) == "from-two":
                    break
                await asyncio.sleep(0.01)
            assert one.config.dynamic_broker == {PW: "from-two"}
            assert pe.PasswordEncoder("shared").decode((await stored(store))[PW]) == "from-two"
            # a broker with another secret alters broker 1's set: the password it cannot
            # decode is written back as it was, not lost
            three = broker(store, {SECRET: "other"}, 3)
            await three.load()
            before = (await stored(store))[PW]
            current = await three.current("1")
            assert current[PW] == before
            await three.apply("1", {**current, "message.max.bytes": "2048"})
            assert await stored(store) == {PW: before, "message.max.bytes": "2048"}
            for _ in range(200):
                if one.config.values.get("message.max.bytes") == "2048":
                    break
                await asyncio.sleep(0.01)
            assert one.config.dynamic_broker == {PW: "from-two", "message.max.bytes": "2048"}
        finally:
            await store.close()

    asyncio.run(scenario())
