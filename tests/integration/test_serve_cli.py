"""`strom serve` refuses bad settings with one readable line and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from strom.testing import BrokerProcess


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    # no admin listener: the default 127.0.0.1:9644 may be taken by another broker here
    return subprocess.run([sys.executable, "-m", "strom", "serve", "--admin-listener=", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "num.partitions=abc"], "num.partitions='abc' is not an integer"),
        (["--set", "novalue"], "expected key=value"),
        (["--listen", "nope"], "--listen expects HOST:PORT"),
        (["--config", "/nonexistent/server.properties"], "cannot read /nonexistent/server.properties"),
    ],
)
def test_bad_settings_are_one_line(tmp_path, args, message) -> None:
    result = serve("--data-dir", str(tmp_path / "d"), *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_second_broker_on_the_same_data_dir_is_refused(tmp_path) -> None:
    with BrokerProcess(tmp_path / "d"):
        second = BrokerProcess(tmp_path / "d")
        result = serve("--data-dir", str(second.data_dir), "--listen", second.bootstrap)
    assert result.returncode == 1
    assert "in use by another broker" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_file_properties_are_applied(tmp_path) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    props = tmp_path / "server.properties"
    props.write_text("# a comment\nnum.partitions=4\nlog.retention.ms = 3600000\n")
    with BrokerProcess(tmp_path / "d", extra_args=["--config", str(props)]) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        from confluent_kafka.admin import NewTopic

        admin.create_topics([NewTopic("t", -1)])["t"].result(timeout=20)
        meta = admin.list_topics("t", timeout=10)
        assert len(meta.topics["t"].partitions) == 4
        res = ConfigResource(ConfigResource.Type.TOPIC, "t")
        assert admin.describe_configs([res])[res].result(timeout=20)["retention.ms"].value == "3600000"


# --- issue 12: unknown keys, log level, checks before creating anything, hang-ups ---------


def test_unknown_properties_warn_and_strict_refuses(tmp_path) -> None:
    from strom.testing import free_port

    props = tmp_path / "server.properties"
    props.write_text("num.partition=3\n")
    strict = serve("--data-dir", str(tmp_path / "s"), "--listen", f"127.0.0.1:{free_port()}",
                   "--set", "log.retention.hourz=1", "--strict")
    assert strict.returncode == 2
    assert strict.stderr.strip() == (
        "strom serve: unknown property 'log.retention.hourz' (did you mean "
        "'log.retention.hours'?); refused by --strict"
    )
    assert not (tmp_path / "s").exists()
    with BrokerProcess(tmp_path / "d", extra_args=[
        "--set", "log.retention.hourz=1", "--set", "log.retention.hours=2", "--config", str(props),
    ]) as broker:  # fmt: skip
        log = broker.log_tail(200)
    assert "WARNING strom: unknown property 'log.retention.hourz' ignored (did you mean " \
           "'log.retention.hours'?)" in log
    assert "unknown property 'num.partition' ignored (did you mean 'num.partitions'?)" in log
    assert "'log.retention.hours' ignored" not in log


@pytest.mark.parametrize("flag", [["-v"], ["--log-level", "debug"]])
def test_verbose_and_log_level_debug_log_debug_lines(tmp_path, flag) -> None:
    from confluent_kafka.admin import AdminClient

    with BrokerProcess(tmp_path / "d", extra_args=flag) as broker:
        AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=20)
        deadline = time.monotonic() + 20
        while "DEBUG strom.broker.server: connection" not in broker.log_tail(400):
            assert time.monotonic() < deadline, broker.log_tail()
            time.sleep(0.1)
    with BrokerProcess(tmp_path / "q", extra_args=["--log-level", "WARNING"]) as quiet:
        AdminClient({"bootstrap.servers": quiet.bootstrap}).list_topics(timeout=20)
    assert " INFO " not in quiet.log_tail(400) and " DEBUG " not in quiet.log_tail(400)


def test_checks_before_anything_is_created(tmp_path) -> None:
    import socket

    a_file = tmp_path / "file"
    a_file.write_text("x")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        in_use = serve("--data-dir", str(tmp_path / "new"), "--listen", f"127.0.0.1:{port}")
    finally:
        busy.close()
    assert in_use.returncode == 2
    assert in_use.stderr.strip() == (
        f"strom serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert not (tmp_path / "new").exists()  # nothing created
    from strom.testing import free_port

    is_file = serve("--data-dir", str(a_file), "--listen", f"127.0.0.1:{free_port()}")
    assert is_file.returncode == 2
    assert is_file.stderr.strip() == f"strom serve: --data-dir {a_file} is a file, not a directory"

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "strom-metadata.json").write_text("garbage")
    broken = serve("--data-dir", str(bad), "--listen", f"127.0.0.1:{free_port()}")
    assert broken.returncode == 1
    assert "Traceback" not in broken.stderr
    assert f"strom serve: {bad / 'strom-metadata.json'}: not valid JSON (" in broken.stderr


def test_a_client_hanging_up_mid_response_is_one_line(tmp_path, topic_name) -> None:
    import socket
    import struct

    from strom.testing.raw import RawConnection
    from tests.integration.clients import create_topic, produce
    from tests.integration.test_fetch_zero_copy import _fetch_request

    with BrokerProcess(tmp_path / "d") as broker:
        create_topic(broker.bootstrap, topic_name, 1)
        produce(broker.bootstrap, topic_name,
                ({"value": bytes([i % 251]) * 10_000} for i in range(800)),
                **{"linger.ms": 20, "batch.size": 500_000})  # fmt: skip
        for _ in range(3):
            conn = RawConnection(broker.bootstrap, timeout=30)
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.sock.sendall(_fetch_request(topic_name, 64 << 20))
            conn.sock.recv(4)  # the response has started; the rest is in flight
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # RST: the broker's next write fails
        deadline = time.monotonic() + 20
        while "client hung up" not in broker.log_tail(400):
            assert time.monotonic() < deadline, broker.log_tail()
            time.sleep(0.1)
        log = broker.log_tail(400)
    assert "Traceback" not in log and " ERROR " not in log, log
    hung = [line for line in log.splitlines() if "client hung up" in line]
    assert all(" INFO strom.broker.server: connection " in line for line in hung), hung
