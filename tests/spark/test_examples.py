"""Each example pipeline in examples/ produces its known answer (on local Spark)."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from strom.testing import BrokerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"strom_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["vehicle_tracking", "website_activity", "log_aggregation"])
def test_example_produces_its_known_answer(
    name: str, spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    example = load_example(name)
    prefix = f"{name.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    answer = example.generate(spark_broker.bootstrap, prefix)
    example.run(spark, spark_broker.bootstrap, prefix, str(tmp_path))
    got = example.result(spark, spark_broker.bootstrap, prefix, str(tmp_path))
    assert len(answer) > 10
    assert got == answer
