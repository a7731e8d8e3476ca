"""The ``strom`` command as a whole: addresses (flag, env, profiles), connection errors,
version, completion, help; topic and group commands added by issue 12."""

from __future__ import annotations

import json
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.testing import BrokerProcess, free_port
from tests.integration.cli_helpers import (
    Cli,
    assert_clean_error,
    eventually,
    parse_table,
    side_by_side,
    strom,
)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    """This module's broker: num.partitions=2, so the default of --partitions shows."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="strom-cli-tools-") as tmp:
        proc = BrokerProcess(Path(tmp) / "data", extra_args=["--set", "num.partitions=2"])
        proc.start()
        try:
            yield proc
        finally:
            proc.stop()


@pytest.fixture
def cli(broker: BrokerProcess) -> Cli:
    return Cli(str(broker.bootstrap))


def test_connection_errors_are_fast_and_specific() -> None:
    """Defect 4: refused, unknown host and malformed addresses all waited 10 s and said
    "Broker transport failure"."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(50)  # accepts TCP connections, never answers Kafka requests
    try:
        cases = [
            (["topic", "list", "-b", f"127.0.0.1:{free_port()}"], "connection refused"),
            (["topic", "list", "-b", "no-such-host.invalid:9092"], "cannot resolve host"),
            (["topic", "list", "-b", "localhost"], "malformed broker address 'localhost'"),
            (["topic", "list", "-b", "localhost:99999"], "malformed broker address"),
            (["produce", "t", "-b", f"127.0.0.1:{free_port()}"], "connection refused"),
            (["consume", "t", "-b", "nohost.invalid:1"], "cannot resolve host"),
            (["group", "list", "-b", f"127.0.0.1:{free_port()}"], "connection refused"),
        ]
        started = time.monotonic()
        results = side_by_side(*(
            (lambda a=a: strom(*a, "--timeout", "40", stdin="x\n")) for a, _ in cases
        ))
        fast = time.monotonic() - started
        for (args, fragment), proc in zip(cases, results, strict=True):
            assert fragment in assert_clean_error(proc), (args, proc.stderr)
        assert fast < 30, fast  # said when known, not after the 40 s --timeout

        started = time.monotonic()
        line = assert_clean_error(strom("topic", "list", "-b",
                                        f"127.0.0.1:{silent.getsockname()[1]}", "--timeout", "1.5"))
        waited = time.monotonic() - started
        assert "no Kafka answer within 1.5 s" in line, line
        # --timeout, not the 10 s default: that alone would take 10 s, whatever the time the
        # CLI takes to start (seconds on a loaded machine, so no tighter bound)
        assert 1.3 < waited < 10, waited
    finally:
        silent.close()


def _unanswered_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A 127.0.0.1 listener whose queue of pending connections is full: a new connection
    attempt gets no answer at all (the kernel drops its SYN), as a host that drops packets."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    held: list[socket.socket] = []
    for _ in range(16):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(listener.getsockname())
        held.append(sock)
        _, writable, _ = select.select([], [sock], [], 0.3)
        if not writable:  # this one is left unanswered: the queue is full
            return listener, held
    raise AssertionError("could not fill the listen queue")


def test_a_connect_timeout_says_it_timed_out_connecting() -> None:
    """Issue 21: an address where no TCP connection comes (a host dropping packets) was
    reported after the wait as "accepts connections but gave no Kafka answer"."""
    listener, held = _unanswered_listener()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    try:
        for args in (["topic", "list"], ["cluster", "config", "get", "--default"]):
            started = time.monotonic()
            line = assert_clean_error(strom(*args, "-b", address, "--timeout", "1.5"))
            waited = time.monotonic() - started
            assert "timed out connecting (no TCP connection within 1.5 s)" in line, (args, line)
            assert address in line and "Kafka answer" not in line, line
            assert waited < 20, waited  # bounded by --timeout (plus start-up)
    finally:
        for sock in held:
            sock.close()
        listener.close()


def test_bootstrap_before_or_after_the_subcommand_env_and_profiles(
    cli: Cli, topic_name: str, tmp_path: Path
) -> None:
    cli.ok("topic", "create", topic_name, "-p", "1")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    dead = f"127.0.0.1:{free_port()}"
    before, after, via_env, flag_wins = side_by_side(
        lambda: strom("-b", cli.bootstrap, "topic", "list", env=env),
        lambda: strom("topic", "list", "--brokers", cli.bootstrap, env=env),
        lambda: strom("topic", "list", env={**env, "STROM_BROKERS": cli.bootstrap}),
        lambda: strom("topic", "list", "-b", cli.bootstrap, env={**env, "STROM_BROKERS": dead}),
    )
    for proc in (before, after, via_env, flag_wins):
        assert proc.returncode == 0, proc.stderr
        assert topic_name in proc.stdout.splitlines()

    created = strom("profile", "create", "local", "-b", cli.bootstrap, env=env)
    assert created.returncode == 0, created.stderr
    strom("profile", "create", "dead", "-b", dead, "--timeout", "3", env=env)
    listed = json.loads(strom("profile", "list", "--format", "json", env=env).stdout)
    assert listed == [
        {"name": "dead", "brokers": dead, "timeout": 3.0, "current": True},
        {"name": "local", "brokers": cli.bootstrap, "timeout": None, "current": False},
    ]
    assert (tmp_path / "config" / "strom" / "profiles.toml").is_file()
    assert "connection refused" in assert_clean_error(strom("topic", "list", env=env))
    assert strom("profile", "use", "local", env=env).returncode == 0
    assert topic_name in strom("topic", "list", env=env).stdout.splitlines()
    with_flag = strom("topic", "list", "--profile", "local", env=env)
    assert topic_name in with_flag.stdout.splitlines()
    table = parse_table(strom("profile", "list", env=env).stdout)
    assert [r["NAME"] for r in table] == ["dead", "local*"]
    assert "no profile named 'nope'" in assert_clean_error(strom("profile", "use", "nope", env=env))
    assert "malformed" in assert_clean_error(strom("profile", "create", "x", "-b", "h", env=env))
    deleted = strom("profile", "delete", "dead", "--format", "json", env=env)
    assert json.loads(deleted.stdout) == [{"name": "dead", "deleted": True}]
    assert [p["name"] for p in json.loads(strom("profile", "list", "--format", "json",
                                                env=env).stdout)] == ["local"]


def test_version_help_on_every_option_and_completion(tmp_path: Path) -> None:
    import strom as strom_package
    from strom.cli.completion import walk
    from strom.cli.main import build_parser

    version = strom("--version")
    assert version.returncode == 0
    assert version.stdout.startswith(f"strom {strom_package.__version__} (confluent-kafka ")

    nodes = walk(build_parser(["serve"]))
    missing = [(n.path, flags) for n in nodes for flags, help_, _a in n.options if not help_]
    assert missing == []
    assert {"topic trim", "topic add-partitions", "group seek", "profile create"} <= {
        n.path for n in nodes
    }

    scripts = side_by_side(*((lambda s=s: strom("completion", s)) for s in ("bash", "zsh", "fish")))
    for proc in scripts:
        assert proc.returncode == 0 and proc.stdout, proc.stderr
    script = tmp_path / "strom.bash"
    script.write_text(scripts[0].stdout)

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        bash = (f"source {script}; COMP_WORDS=(strom {line}); COMP_CWORD={len(words)}; "
                "_strom; printf '%s\\n' \"${COMPREPLY[@]}\"")
        out = subprocess.run(["bash", "-c", bash], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert complete("top") == ["topic"]
    assert set(complete("topic", "")) >= {"create", "list", "describe", "trim", "add-partitions"}
    assert complete("-b", "x:1", "group", "se") == ["seek"]
    assert "--partitions" in complete("topic", "create", "t", "--")
    assert complete("produce", "t", "--acks", "") == ["0", "1", "all", "-1"]
    assert complete("consume", "t", "--value-encoding", "b") == ["base64"]
    assert "complete -F _strom strom" in scripts[0].stdout.replace("-o default ", "")
    assert "bashcompinit" in scripts[1].stdout
    assert "complete -c strom" in scripts[2].stdout and "'__strom_at \"topic create\"'" in (
        scripts[2].stdout
    )


def test_topic_default_partitions_add_partitions_trim_and_describe(
    cli: Cli, broker: BrokerProcess, topic_name: str
) -> None:
    assert json.loads(cli.ok("topic", "create", topic_name, "--format", "json")) == [
        {"name": topic_name, "created": True}
    ]
    cli.ok("produce", topic_name, "-p", "0", stdin="".join(f"m{i}\n" for i in range(5)))
    grown = json.loads(cli.ok("topic", "add-partitions", topic_name, "-n", "2", "--format",
                              "json"))  # fmt: skip
    assert grown == [{"name": topic_name, "previous_partitions": 2, "partitions": 4}]
    assert "must be larger" in cli.fail("topic", "add-partitions", topic_name, "--total", "3")

    plan = json.loads(cli.ok("topic", "trim", topic_name, "-o", "-2", "-p", "0", "--format",
                             "json"))  # fmt: skip
    assert plan == [{"topic": topic_name, "partition": 0, "log_start_offset": 0,
                     "new_log_start_offset": 3}]  # fmt: skip
    rows = json.loads(cli.ok("topic", "describe", topic_name, "-p", "--format", "json"))
    assert rows[0]["log_start_offset"] == 0  # the dry run deleted nothing
    cli.ok("topic", "trim", topic_name, "-o", "-2", "-p", "0", "--yes")
    rows = json.loads(cli.ok("topic", "describe", topic_name, "-p", "--format", "json"))
    assert [(r["partition"], r["log_start_offset"], r["log_end_offset"], r["messages"])
            for r in rows] == [(0, 3, 5, 2), (1, 0, 0, 0), (2, 0, 0, 0), (3, 0, 0, 0)]
    on_disk = [sum(f.stat().st_size for f in (broker.data_dir / f"{topic_name}-{p}").glob("*.log"))
               for p in range(4)]  # fmt: skip
    assert on_disk[0] > 5 * 2 and on_disk[1:] == [0, 0, 0]  # trim deletes no segment here
    assert [r["size"] for r in rows] == on_disk
    assert cli.lines("consume", topic_name, "-p", "0", "-o", "start", "-e") == ["m3", "m4"]
    text = parse_table(cli.ok("topic", "describe", topic_name, "-p"))
    assert (text[0]["PARTITION"], text[0]["LOG-START-OFFSET"], text[0]["LOG-END-OFFSET"],
            text[0]["MESSAGES"], text[0]["SIZE"]) == ("0", "3", "5", "2", str(on_disk[0]))

    cli.ok("topic", "alter-config", topic_name, "retention.ms=123456")
    configs = {c["key"]: c for c in json.loads(
        cli.ok("topic", "describe", topic_name, "-c", "--format", "json"))}
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["source"]) == (
        "123456", "DYNAMIC_TOPIC_CONFIG")
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"
    assert len(configs) >= 10
    [doc] = json.loads(cli.ok("topic", "describe", topic_name, "--format", "json"))
    assert doc["configs"] == {"retention.ms": "123456"} and doc["partition_count"] == 4


def test_topic_list_hides_internal_topics_unless_asked(cli: Cli, topic_name: str) -> None:
    cli.ok("topic", "create", topic_name)
    group = f"g-{topic_name}"
    cli.ok("produce", topic_name, stdin="x\n")
    cli.ok("consume", topic_name, "-g", group, "-o", "start", "-n", "1", "--timeout-ms", "30000")
    plain, everything, as_json = side_by_side(
        lambda: cli.lines("topic", "list"),
        lambda: cli.lines("topic", "list", "-i"),
        lambda: json.loads(cli.ok("topic", "list", "-i", "--format", "json")),
    )
    assert topic_name in plain and "__consumer_offsets" not in plain
    assert "__consumer_offsets" in everything
    assert {"name": "__consumer_offsets", "partitions": 50, "replicas": 1, "internal": True} in (
        as_json
    )


def test_group_lag_uncommitted_partitions_and_seek(cli: Cli, topic_name: str) -> None:
    group = f"g-{topic_name}"
    cli.ok("topic", "create", topic_name, "-p", "3")
    cli.ok("produce", topic_name, "-p", "0", stdin="a\nb\nc\nd\n")
    cli.ok("produce", topic_name, "-p", "2", stdin="e\n")
    # commit partition 0 at 1 and nothing else
    cli.ok("group", "seek", group, "--topic", f"{topic_name}:0", "--to-offset", "1", "--execute")
    rows = parse_table(cli.ok("group", "describe", group))
    assert list(rows[0]) == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                             "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]  # fmt: skip
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows] == [
        ("0", "1", "4", "3"), ("1", "-", "0", "-"), ("2", "-", "1", "-")
    ]
    [state] = json.loads(cli.ok("group", "describe", group, "--state", "--format", "json"))
    assert (state["state"], state["total_lag"]) == ("Empty", 3)
    table = parse_table(cli.ok("group", "describe", group, "--state"))
    assert table[0]["TOTAL-LAG"] == "3"
    cli.ok("group", "seek", group, "--topic", topic_name, "--to-latest", "--execute")
    [state] = json.loads(cli.ok("group", "describe", group, "--state", "--format", "json"))
    assert state["total_lag"] == 0
    eventually(lambda: json.loads(cli.ok("group", "delete", group, "--format", "json")) == [
        {"group": group, "deleted": True}])


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (apt: fish)")
def test_fish_completion_completes(tmp_path: Path) -> None:
    script = tmp_path / "strom.fish"
    script.write_text(strom("completion", "fish").stdout)
    probe = (f"source {script}; complete -C 'strom topic cr'; complete -C 'strom -b x:1 group se'; "
             "complete -C 'strom produce t --acks '")
    out = subprocess.run(["fish", "-c", probe], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    words = [line.split("\t")[0] for line in out.stdout.splitlines()]
    assert words == ["create", "seek", "0", "1", "all", "-1"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (apt: zsh)")
def test_zsh_completion_loads_and_completes(tmp_path: Path) -> None:
    script = tmp_path / "_strom"
    script.write_text(strom("completion", "zsh").stdout)
    probe = (f"source {script}; f() {{ emulate -L sh; setopt kshglob noshglob braceexpand; "
             "COMP_WORDS=(strom produce t --acks ''); COMP_CWORD=4; _strom; "
             'echo "${COMPREPLY[@]}"; }; f')
    out = subprocess.run(["zsh", "-c", probe], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "all", "-1"]


def _on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """stdout of ``strom ARGS`` run with a pseudo-terminal as stdout."""
    import os
    import pty
    import sys

    master, slave = pty.openpty()
    full = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    full.update({**env, "COLUMNS": "120", "TERM": "xterm-256color"})
    with subprocess.Popen([sys.executable, "-m", "strom", *args], stdout=slave,
                          stderr=subprocess.PIPE, env=full) as proc:  # fmt: skip
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(30)
    os.close(master)
    return b"".join(chunks).decode(errors="replace")


def test_tables_are_rich_on_a_terminal_and_plain_when_piped(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    strom("profile", "create", "alpha", "-b", "127.0.0.1:1", env=env)
    strom("profile", "create", "beta-with-a-long-name", "-b", "127.0.0.1:2", env=env)
    piped = strom("profile", "list", env=env).stdout
    assert piped.splitlines() == [
        "NAME                   BROKERS     TIMEOUT",
        "alpha                  127.0.0.1:1 -",
        "beta-with-a-long-name* 127.0.0.1:2 -",
    ]
    shown = _on_a_terminal("profile", "list", env=env)
    assert "\x1b[" in shown  # styled headers
    assert "─" in shown  # rich's header rule
    plain = _on_a_terminal("profile", "list", env={**env, "NO_COLOR": "1"})
    assert "36m" not in plain and "─" in plain  # NO_COLOR: no colour (bold stays)
    rows = [line.split() for line in shown.splitlines() if "127.0.0.1" in line]
    assert [r[0] for r in rows] == ["alpha", "beta-with-a-long-name*"]


def test_help_texts_and_the_connect_url_flag() -> None:
    """Issue 21: the help said ``txn`` had list/describe/hanging only and ``cluster`` was
    "cluster-wide information"; ``connector --help`` listed the broker options; the Connect URL
    was ``--url`` on ``connector`` and ``--connect-url`` on ``console`` (now ``--connect-url``
    on both, ``--url`` an alias)."""
    top = strom("--help").stdout
    txn = " ".join(top.split("txn", 1)[1].split("connect ", 1)[0].split())
    assert "describe-producers" in txn and "abort" in txn and "find-hanging" in txn, txn
    assert "cluster-wide information" not in top
    cluster = " ".join(top.split("cluster", 1)[1].split("profile", 1)[0].split())
    assert all(word in cluster for word in ("health", "up", "down", "stop", "start")), cluster

    for args in (["connector", "list", "--help"], ["connector", "create", "--help"],
                 ["connector", "--help"]):
        text = strom(*args).stdout
        assert "--bootstrap-server" not in text and "--profile" not in text, (args, text)
        assert "--timeout SECONDS" not in text, (args, text)
    assert "--connect-url URL, --url URL" in strom("connector", "status", "--help").stdout
    assert "--connect-url URL, --url URL" in strom("console", "--help").stdout

    dead = f"http://127.0.0.1:{free_port()}"
    lines = side_by_side(*((lambda f=f: assert_clean_error(strom("connector", "list", f, dead)))
                           for f in ("--url", "--connect-url")))  # fmt: skip
    for line in lines:
        assert line.startswith(f"strom: error: cannot reach the Connect worker at {dead}"), line


def test_cluster_config_delete_says_deleted(cli: Cli) -> None:
    """Issue 21: it printed "Delete log.retention.ms on broker 1."."""
    assert cli.ok("cluster", "config", "set", "log.retention.ms=3600000") == (
        "Set log.retention.ms on broker 1.\n")
    assert cli.ok("cluster", "config", "delete", "log.retention.ms") == (
        "Deleted log.retention.ms on broker 1.\n")


def test_connector_create_on_a_connect_cluster(broker: BrokerProcess, tmp_path: Path) -> None:
    """Issue 21: on a distributed worker (tasks are assigned a moment after the create) the
    CLI said "Created connector to-file (0 task(s))"."""
    from strom.testing import ConnectWorkerProcess

    worker = ConnectWorkerProcess(tmp_path / "worker", broker.bootstrap, distributed=True)
    worker.start(90)
    try:
        spec = tmp_path / "sink.json"
        spec.write_text(json.dumps({"name": "to-file", "config": {
            "connector.class": "FileStreamSink", "topics": "cli-sink",
            "file": str(tmp_path / "out.txt")}}))  # fmt: skip
        deadline = time.monotonic() + 60
        while True:  # a worker answers 409 until it has joined its group
            proc = strom("connector", "create", "-f", str(spec), "--url", worker.url)
            if proc.returncode == 0 or "409" not in proc.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("Created connector to-file"), proc.stdout
        assert "(0 task(s))" not in proc.stdout, proc.stdout
    finally:
        worker.stop()
