"""Kafka's own command-line tools, one scenario run against strom and against Apache Kafka.

:data:`SINGLE` is a list of tool runs (the same input each time) on a fresh single broker:
topics, configs, console producer and consumer, consumer groups (describe, reset-offsets,
list), get-offsets, delete-records, leader election, reassign-partitions, log-dirs, the
producer perf test with a transactional id and then kafka-transactions, the consumer perf test,
and the verifiable producer and consumer. :func:`run_scenario` runs them
(:class:`~tests.jvm.jvm.JavaProcess`: every tool in one JVM through ``io.strom.jvm.ToolRunner``,
except the verifiable tools, whose output is written from shutdown hooks: a JVM each) and
returns each step's exit code and normalized output.

Normalization (:func:`normalize`) removes what differs between any two runs, whatever the
broker: ids (topic ids, member ids, producer ids), times and rates, host names and paths, log
sizes; and it sorts what Kafka's tools print in hash-map order. Everything else — exit codes,
messages, table columns, partitions, offsets, leaders, replicas, configs and their sources —
must be the same. ``tools/record_kafka_goldens.py`` recorded ``golden/tools-single.txt`` from
a real Kafka (4.4.0, KRaft, one node) with this same scenario; tests/jvm/test_kafka_tools.py
compares strom's run with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.jvm.jvm import JavaProcess

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
VERIFIABLE = {"kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
              "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer"}  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One tool run: its script name, arguments (``{B}``: the bootstrap servers, ``{F:name}``:
    the path of ``files[name]``), the normalizers of its output, and whether its standard error
    is compared too (it holds some tools' real output). ``known``: why strom's output differs
    (a difference listed in docs/jvm.md; the test expects the difference, strictly)."""

    tool: str
    args: tuple[str, ...]
    norm: tuple[str, ...] = ()
    stdin: str | None = None
    stderr: bool = False
    files: dict[str, str] = field(default_factory=dict)
    known: str | None = None


def S(tool: str, *args: str, norm: Sequence[str] = (), stdin: str | None = None,
      stderr: bool = False, files: dict[str, str] | None = None,
      known: str | None = None) -> Step:  # fmt: skip
    return Step(tool, tuple(args), tuple(norm), stdin, stderr, dict(files or {}), known)


B = ("--bootstrap-server", "{B}")
SINGLE: list[Step] = [
    S("kafka-topics", *B, "--create", "--topic", "tools-a", "--partitions", "3",
      "--replication-factor", "1", "--config", "retention.ms=3600000"),
    S("kafka-topics", *B, "--create", "--topic", "tools-a", "--partitions", "3",
      stderr=True),  # exists already: an error and exit 1
    S("kafka-topics", *B, "--list", "--exclude-internal"),
    S("kafka-topics", *B, "--describe", "--topic", "tools-a", norm=["ids"]),
    S("kafka-topics", *B, "--alter", "--topic", "tools-a", "--partitions", "4"),
    S("kafka-topics", *B, "--describe", "--topic", "tools-a", norm=["ids"]),
    S("kafka-configs", *B, "--entity-type", "topics", "--entity-name", "tools-a", "--describe"),
    S("kafka-configs", *B, "--entity-type", "topics", "--entity-name", "tools-a", "--alter",
      "--add-config", "retention.ms=7200000,cleanup.policy=compact,segment.bytes=1048576"),
    S("kafka-configs", *B, "--entity-type", "topics", "--entity-name", "tools-a", "--describe",
      norm=["sort"]),
    S("kafka-configs", *B, "--entity-type", "topics", "--entity-name", "tools-a", "--alter",
      "--delete-config", "cleanup.policy,segment.bytes"),
    S("kafka-configs", *B, "--entity-type", "topics", "--entity-name", "tools-a", "--describe"),
    S("kafka-configs", *B, "--entity-type", "topics", "--entity-name", "tools-a", "--alter",
      "--add-config", "retention.ms=soon", stderr=True),
    S("kafka-configs", *B, "--entity-type", "brokers", "--entity-name", "1", "--describe"),
    S("kafka-console-producer", *B, "--topic", "tools-a", "--reader-property", "parse.key=true",
      "--reader-property", "key.separator=:",
      stdin="".join(f"k{i}:v{i}\n" for i in range(12))),
    S("kafka-console-consumer", *B, "--topic", "tools-a", "--from-beginning", "--max-messages",
      "12", "--formatter-property", "print.key=true", "--formatter-property",
      "print.partition=true", "--formatter-property", "print.offset=true", "--group", "tools-g",
      norm=["sort"]),
    S("kafka-consumer-groups", *B, "--describe", "--group", "tools-g", norm=["ws", "sort"],
      stderr=True),
    S("kafka-consumer-groups", *B, "--describe", "--group", "tools-g", "--state",
      norm=["ws"]),
    S("kafka-consumer-groups", *B, "--reset-offsets", "--group", "tools-g", "--topic",
      "tools-a:0,1", "--to-offset", "1", "--execute", norm=["ws", "sort"]),
    S("kafka-consumer-groups", *B, "--reset-offsets", "--group", "tools-g", "--all-topics",
      "--to-earliest", "--dry-run", norm=["ws", "sort"]),
    S("kafka-consumer-groups", *B, "--list"),
    S("kafka-get-offsets", *B, "--topic", "tools-a"),
    S("kafka-get-offsets", *B, "--topic", "tools-a", "--time", "-2"),
    S("kafka-delete-records", *B, "--offset-json-file", "{F:delete}", norm=["sort"],
      files={"delete": json.dumps({"version": 1, "partitions": [
          {"topic": "tools-a", "partition": p, "offset": 1} for p in range(4)]})}),
    S("kafka-get-offsets", *B, "--topic", "tools-a", "--time", "-2"),
    S("kafka-leader-election", *B, "--election-type", "preferred", "--topic", "tools-a",
      "--partition", "0", stderr=True),
    S("kafka-reassign-partitions", *B, "--topics-to-move-json-file", "{F:move}", "--broker-list",
      "1", "--generate", norm=["paths"],
      files={"move": json.dumps({"version": 1, "topics": [{"topic": "tools-a"}]})}),
    S("kafka-reassign-partitions", *B, "--reassignment-json-file", "{F:reassign}", "--execute",
      norm=["paths"], files={"reassign": json.dumps({"version": 1, "partitions": [
          {"topic": "tools-a", "partition": 0, "replicas": [1], "log_dirs": ["any"]}]})}),
    S("kafka-reassign-partitions", *B, "--reassignment-json-file", "{F:reassign}", "--verify",
      files={"reassign": json.dumps({"version": 1, "partitions": [
          {"topic": "tools-a", "partition": 0, "replicas": [1], "log_dirs": ["any"]}]})}),
    S("kafka-log-dirs", *B, "--describe", "--topic-list", "tools-a", norm=["logdirs"]),
    S("kafka-producer-perf-test", "--topic", "tools-p", "--num-records", "2000", "--record-size",
      "100", "--throughput", "-1", "--transactional-id", "tools-txn",
      "--transaction-duration-ms", "100", "--command-property", "bootstrap.servers={B}",
      norm=["numbers"]),
    S("kafka-transactions", *B, "list", norm=["ws", "ids"]),
    S("kafka-transactions", *B, "describe", "--transactional-id", "tools-txn",
      norm=["ws", "ids"]),
    S("kafka-transactions", *B, "describe-producers", "--topic", "tools-p", "--partition", "0",
      norm=["ws", "ids"], known="LastSequence: Kafka 4 runs transaction version 2 (KIP-890: "
      "the epoch is bumped at each commit, so the sequence restarts, -1); strom does not "
      "finalize transaction.version, the producer keeps its epoch and its last sequence"),
    S("kafka-consumer-perf-test", *B, "--topic", "tools-p", "--num-records", "2000", "--group",
      "tools-perf", norm=["numbers"]),
    S("kafka-verifiable-producer", *B, "--topic", "tools-v", "--max-messages", "5",
      norm=["events"]),
    S("kafka-verifiable-consumer", *B, "--topic", "tools-v", "--group-id", "tools-vg",
      "--max-messages", "5", "--verbose", norm=["events"]),
]


# -- running ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    exit: int
    stdout: str
    stderr: str


def _argv(step: Step, bootstrap: str, files: dict[str, Path]) -> list[str]:
    out = []
    for arg in step.args:
        arg = arg.replace("{B}", bootstrap)
        for name, path in files.items():
            arg = arg.replace("{F:" + name + "}", str(path))
        out.append(arg)
    return out


def run_scenario(steps: Sequence[Step], bootstrap: str, work: Path,
                 timeout: float = 240.0) -> list[Result]:  # fmt: skip
    """Run ``steps`` against ``bootstrap``; each one's raw result, in order."""
    work.mkdir(parents=True, exist_ok=True)
    lines: list[tuple[int, Step, list[str]]] = []
    results: dict[int, Result] = {}
    for n, step in enumerate(steps):
        files = {}
        for name, text in step.files.items():
            files[name] = work / f"step{n}-{name}.json"
            files[name].write_text(text + "\n")
        argv = _argv(step, bootstrap, files)
        if step.stdin is not None:
            (work / f"step{n}.in").write_text(step.stdin)
            argv.append(f"<{work / f'step{n}.in'}")
        lines.append((n, step, argv))

    def batch(chunk: list[tuple[int, Step, list[str]]]) -> None:
        if not chunk:
            return
        first = chunk[0][0]
        spec = work / f"steps-{first}.tsv"
        spec.write_text("".join("\t".join([s.tool, *a]) + "\n" for _, s, a in chunk))
        out = work / f"results-{first}.txt"
        with JavaProcess("io.strom.jvm.ToolRunner", [str(spec), str(out)],
                         work / f"runner-{first}.log") as runner:  # fmt: skip
            runner.wait(timeout)
        for (n, _, _), result in zip(chunk, parse_results(out.read_text()), strict=True):
            results[n] = result

    pending: list[tuple[int, Step, list[str]]] = []
    for n, step, argv in lines:
        if step.tool not in VERIFIABLE:
            pending.append((n, step, argv))
            continue
        batch(pending)
        pending = []
        log = work / f"step{n}.out"
        with JavaProcess(VERIFIABLE[step.tool], argv, log,
                         extra_flags=["-Dorg.slf4j.simpleLogger.logFile=System.err"]) as proc:
            code = proc.wait(timeout)
        text = log.read_text(errors="replace")
        events = "".join(line + "\n" for line in text.splitlines() if line.startswith("{"))
        others = "".join(line + "\n" for line in text.splitlines() if not line.startswith("{"))
        results[n] = Result(code, events, others)
    batch(pending)
    return [results[n] for n in range(len(steps))]


def parse_results(text: str) -> list[Result]:
    out = []
    for block in re.split(r"^### STEP \d+ ", text, flags=re.M)[1:]:
        head, _, body = block.partition("\n")
        stdout, _, stderr = body.partition("### STDERR\n")
        out.append(Result(int(head.removeprefix("exit=")), stdout, stderr))
    return out


# -- normalizing ------------------------------------------------------------------------------

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _ids(text: str) -> str:
    text = re.sub(r"(TopicId: )[A-Za-z0-9_-]{22}", r"\1<ID>", text)
    text = re.sub(r"127\.0\.0\.\d+:\d+", "<HOST:PORT>", text)
    text = re.sub(r"[\w.-]*-" + _UUID, "<MEMBER>", text)
    # kafka-transactions: producer ids, epochs, start times, durations, timestamps
    return text


def _ws(text: str) -> str:
    return "\n".join(" ".join(line.split()) for line in text.splitlines()) + (
        "\n" if text.endswith("\n") else "")  # fmt: skip


def _sort(text: str) -> str:
    return "".join(sorted(line + "\n" for line in text.splitlines()))


def _numbers(text: str) -> str:
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d+", "<TIME>", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def _paths(text: str) -> str:
    return re.sub(r'"log_dirs":\["[^"]*"(,"[^"]*")*\]', '"log_dirs":[<DIRS>]', text)


def _logdirs(text: str) -> str:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            data = json.loads(line)
            for b in data["brokers"]:
                for d in b["logDirs"]:
                    d["logDir"] = "<DIR>"
                    for p in d["partitions"]:
                        p["size"] = "<SIZE>" if p["size"] > 0 else 0
                    d["partitions"].sort(key=lambda p: p["partition"])
            line = json.dumps(data, sort_keys=True)
        out.append(line)
    return "\n".join(out) + "\n"


def _events(text: str) -> str:
    """Verifiable tools' JSON events: without timestamps and throughput figures."""
    out = []
    for line in text.splitlines():
        data = json.loads(line)
        data.pop("timestamp", None)
        if data.get("name") == "tool_data":
            data["avg_throughput"] = "<RATE>"
        out.append(json.dumps(data, sort_keys=True))
    return "\n".join(out) + "\n"


def _transactions(text: str) -> str:
    """Mask producer ids and times in kafka-transactions' columns (after ``ws``)."""
    lines = text.splitlines()
    if not lines:
        return text
    head = lines[0].split(" ")
    masked = {"ProducerId", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
              "LastTimestamp", "ProducerEpoch", "LatestCoordinatorEpoch"}  # fmt: skip
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(" ")
        out.append(" ".join("<X>" if i < len(head) and head[i] in masked else c
                            for i, c in enumerate(cells)))  # fmt: skip
    return "\n".join(out) + "\n"


NORMALIZERS: dict[str, Callable[[str], str]] = {
    "ids": _ids, "ws": _ws, "sort": _sort, "numbers": _numbers, "paths": _paths,
    "logdirs": _logdirs, "events": _events,
}  # fmt: skip


def normalize(step: Step, result: Result) -> str:
    """One step's comparable text: exit code, stdout (and stderr) after its normalizers."""

    def clean(text: str) -> str:
        text = _ids(text)  # member ids are never comparable
        for name in step.norm:
            text = NORMALIZERS[name](text)
        if step.tool == "kafka-transactions":
            text = _transactions(text)
        return text

    shown = f"$ {step.tool} {' '.join(a for a in step.args if a not in B)}\nexit={result.exit}\n"
    shown += clean(result.stdout)
    if step.stderr:
        shown += "--- stderr\n" + clean(_strip_stderr(result.stderr))
    return shown


def _strip_stderr(text: str) -> str:
    """Standard error without the clients' own log lines (WARN ...) and Java's stack frames."""
    keep = []
    for line in text.splitlines():
        if re.match(r"^\[[^\]]+\] (WARN|INFO|ERROR|DEBUG) ", line) or line.startswith("\tat "):
            continue
        keep.append(line)
    return "\n".join(keep) + ("\n" if keep else "")


def render(steps: Sequence[Step], results: Sequence[Result]) -> str:
    return "\n".join(normalize(s, r) for s, r in zip(steps, results, strict=True))
