"""The transactional history checker (strom.testing.txn_workload.check): every anomaly it
names, from histories written by hand, and a clean history that passes."""

from __future__ import annotations

from strom.testing.txn_workload import ABORTED, COMMITTED, UNKNOWN, Txn, check


def _final(*entries: tuple[int, int, bytes]) -> dict[int, list[tuple[int, bytes]]]:
    out: dict[int, list[tuple[int, bytes]]] = {}
    for partition, offset, value in entries:
        out.setdefault(partition, []).append((offset, value))
    return out


def test_a_clean_history_passes() -> None:
    txns = [Txn("t", 2, [b"t-1", b"t-2"], COMMITTED, 10.0), Txn("t", 3, [b"t-3"], ABORTED),
            Txn("t", 5, [b"t-4", b"t-5"], UNKNOWN, 20.0)]  # fmt: skip
    final = _final((0, 0, b"t-1"), (0, 2, b"t-2"), (1, 0, b"t-4"), (0, 5, b"t-5"))
    reads = [("r", 0, 0, b"t-1"), ("r", 1, 0, b"t-4"), ("r", 1, 0, b"t-4")]  # re-read: fine
    first_read = {b"t-1": 10.5, b"t-4": 21.0}  # after each commit was asked
    report = check(txns, reads, [(0, 1), (0, 3), (0, 3)], final, first_read)
    assert report.ok, str(report)
    assert report.counts["txns_committed"] == 1 and report.counts["final_values"] == 4


def test_each_anomaly_is_named() -> None:
    txns = [Txn("t", 2, [b"t-1", b"t-2"], COMMITTED, 1.0), Txn("t", 3, [b"t-3"], ABORTED),
            Txn("t", 5, [b"t-4", b"t-5"], UNKNOWN, 2.0), Txn("t", 6, [b"t-6"], UNKNOWN),
            Txn("t", 8, [b"t-7", b"t-8"], COMMITTED, 3.0), Txn("t", 9, [b"t-9"], UNKNOWN),
            Txn("t", 10, [b"t-10"], COMMITTED, 5.0)]  # fmt: skip
    final = _final(
        (0, 0, b"t-1"),               # t-2 lost
        (0, 1, b"t-3"),               # aborted, yet visible
        (1, 0, b"t-4"),               # t-5 missing: a torn transaction of unknown outcome
        (2, 0, b"t-8"), (2, 1, b"t-7"),  # reordered
        (2, 2, b"t-7"),               # duplicated
        (2, 3, b"x-1"),               # unexpected
        (2, 4, b"t-9"),               # visible though no commit was ever asked
        (2, 5, b"t-10"),              # read before its commit was asked (below)
    )  # fmt: skip
    reads = [("r", 1, 5, b"t-6"),     # never committed (absent from the final read)
             ("r", 2, 5, b"t-10")]  # fmt: skip
    report = check(txns, reads, [(0, 5), (0, 3)], final, {b"t-6": 4.0, b"t-10": 4.5})
    names = {kind for kind, found in report.anomalies.items() if found}
    assert names == {"lost", "aborted_read", "torn", "reordered", "duplicated", "unexpected",
                     "uncommitted_read", "offsets_backwards", "never_committed_visible",
                     "read_before_commit"}, str(report)
    assert [a.split(":")[0] for a in report.anomalies["read_before_commit"]] == ["t#10"]
    assert not report.ok
