"""Kafka's own command-line tools against strom print what they print against Apache Kafka.

The scenario (:data:`tests.jvm.tools_scenario.SINGLE`: kafka-topics, kafka-configs, the console
producer and consumer, kafka-consumer-groups describe / reset-offsets / list, kafka-get-offsets,
kafka-delete-records, kafka-leader-election, kafka-reassign-partitions, kafka-log-dirs, the
producer and consumer perf tests, kafka-transactions, the verifiable producer and consumer)
runs once against a fresh strom broker; each test compares one step's exit code and normalized
output with what the same step printed against a real Kafka 4.4.0 (KRaft, one node), recorded
by ``tools/record_kafka_goldens.py`` in ``tests/jvm/golden/tools-single.txt``. Ids, times,
rates, paths and sizes are masked (``tools_scenario.normalize``), nothing else.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jvm.tools_scenario import GOLDEN_DIR, SINGLE, normalize, run_scenario
from tests.topology import SINGLE as SINGLE_TOPOLOGY
from tests.topology import module_broker

pytestmark = [pytest.mark.jvm, pytest.mark.timeout(400)]
STEPS = [pytest.param(n, id=f"{n:02d}-{s.tool}", marks=[pytest.mark.xfail(
    strict=True, reason=f"known difference (docs/jvm.md): {s.known}")] if s.known else [])
    for n, s in enumerate(SINGLE)]  # fmt: skip


def golden_steps() -> list[str]:
    return (GOLDEN_DIR / "tools-single.txt").read_text().split("\n$ ")


@pytest.fixture(scope="module")
def strom_outputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    work = tmp_path_factory.mktemp("tools")
    # a broker of its own: the scenario lists topics and groups, so nothing else may be there
    with module_broker(SINGLE_TOPOLOGY, work / "broker") as broker:
        results = run_scenario(SINGLE, broker.bootstrap, work / "run")
        yield [normalize(s, r) for s, r in zip(SINGLE, results, strict=True)]


@pytest.mark.parametrize("step", STEPS)
def test_tool_output_matches_kafka(strom_outputs: list[str], step: int) -> None:
    expected = golden_steps()
    assert len(expected) == len(SINGLE), "golden file out of date: tools/record_kafka_goldens.py"
    want = expected[step] if step == 0 else "$ " + expected[step]
    got = strom_outputs[step]
    want, got = want.rstrip("\n") + "\n", got.rstrip("\n") + "\n"
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            "kafka", "strom"))  # fmt: skip
        raise AssertionError(f"{SINGLE[step].tool} prints differently on strom:\n{diff}")


def test_scenario_and_golden_agree() -> None:
    """The golden file was recorded from this very scenario (same steps, same order)."""
    heads = [s.split("\n", 1)[0].removeprefix("$ ") for s in golden_steps()]
    assert [h.split(" ", 1)[0] for h in heads] == [s.tool for s in SINGLE]
    assert Path(GOLDEN_DIR / "tools-single.txt").read_text().startswith("$ kafka-topics")
