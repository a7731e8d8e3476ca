"""tests/parallel.py's units of work: a module's serial tests apart from its others."""

from __future__ import annotations

from pathlib import Path

from tests.parallel import SERIAL_SUFFIX, read_serial_ids, unit_of, write_serial_ids


def test_a_modules_serial_tests_are_a_unit_of_their_own() -> None:
    serial = frozenset({"tests/a/test_m.py::test_timed", "tests/a/test_t.py::test_x[cluster3]"})
    assert unit_of("tests/a/test_m.py::test_plain", serial) == "tests/a/test_m.py"
    assert unit_of("tests/a/test_m.py::test_timed", serial) == "tests/a/test_m.py" + SERIAL_SUFFIX
    # a both_topologies module: the topology's unit, its serial tests apart again
    assert unit_of("tests/a/test_t.py::test_x[cluster3]", serial) == \
        "tests/a/test_t.py:cluster3" + SERIAL_SUFFIX  # fmt: skip
    assert unit_of("tests/a/test_t.py::test_x[single]", serial) == "tests/a/test_t.py:single"
    assert unit_of("tests/a/test_m.py::test_timed") == "tests/a/test_m.py"  # none known


def test_the_serial_ids_go_from_the_workers_to_the_controller(tmp_path: Path) -> None:
    assert read_serial_ids(tmp_path) == frozenset()  # not written (yet): no test is apart
    ids = frozenset({"tests/a/test_m.py::test_timed"})
    write_serial_ids(tmp_path, ids)
    write_serial_ids(tmp_path, ids)  # every worker writes the same list
    assert read_serial_ids(tmp_path) == ids
    assert [p.name for p in tmp_path.iterdir()] == ["serial-ids.json"]  # no temp file left
