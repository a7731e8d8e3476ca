"""The example pipelines name themselves by their file, also when run as a script (issue 21:
``python examples/vehicle_tracking.py`` printed ``"example": "__main__-…"``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _pipeline() -> ModuleType:
    spec = importlib.util.spec_from_file_location("strom_example_pipeline",
                                                  EXAMPLES / "_pipeline.py")  # fmt: skip
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_example_run_as_a_script_is_named_by_its_file() -> None:
    pipeline = _pipeline()
    for name in ("vehicle_tracking", "website_activity", "log_aggregation"):
        assert (EXAMPLES / f"{name}.py").is_file()
        script = ModuleType("__main__")
        script.__file__ = str(EXAMPLES / f"{name}.py")
        assert pipeline.example_name(script) == name
        imported = ModuleType(f"examples.{name}")  # imported without a file: its name
        assert pipeline.example_name(imported) == name
