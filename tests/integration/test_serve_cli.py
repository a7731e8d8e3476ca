"""`strom serve` refuses bad settings with one readable line and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from strom.testing import BrokerProcess


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom", "serve", *args],
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
