"""CI's guard on the hot paths (issue 20): instruction counts of fixed workloads (append with
validation, Produce and Fetch through a broker, decoding to Arrow, encoding Arrow columns into
batches) under valgrind's callgrind, against ``benchmarks/instruction_budget.json``. A workload over 1.5x its budget fails; a change
that means to cost more runs ``python benchmarks/instruction_guard.py --update`` and commits
the new budget with it. See ``benchmarks/instruction_guard.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GUARD = Path(__file__).resolve().parents[2] / "benchmarks" / "instruction_guard.py"


@pytest.mark.timeout(900)
def test_hot_paths_stay_within_their_instruction_budget() -> None:
    done = subprocess.run([sys.executable, str(GUARD)], capture_output=True, text=True,
                          timeout=880)  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines, f"the guard printed nothing:\n{done.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert "error" not in report, report["error"]  # e.g. valgrind missing: apt-get install it
    over = {name: w for name, w in report["workloads"].items() if w.get("over") or w["budget"] is None}
    assert not over, f"over budget (x{report['tolerance']}): {json.dumps(over)}"
    assert done.returncode == 0 and report["ok"], report
    # the budget keeps its bite: a count far below it means the budget should be lowered
    below = sorted(name for name, w in report["workloads"].items() if w.get("below"))
    if below:
        print(f"instruction counts far below the budget for {below}: consider --update")
