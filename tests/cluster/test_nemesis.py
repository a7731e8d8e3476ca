"""The mixed-fault nemesis (:mod:`strom.testing.nemesis`) as a test: one fault of each kind
(kill -9, SIGSTOP past the ZooKeeper session, nftables cuts of a leader, of the controller and
of ZooKeeper, a full disk, a slow disk), in an order and with timings drawn from a seed,
against idempotent and transactional writers and read_committed group readers; nothing
acknowledged may be lost, duplicated or reordered, no aborted or uncommitted record read, no
committed offset go backwards. The seed is printed (and in any failure): set
``STROM_NEMESIS_SEED`` to replay it.

CI runs one fixed seed (:data:`CI_SEED`, which passed), so that a red run is a regression, not
the luck of a draw; ``STROM_NEMESIS_SEED=random`` draws one. Drawn seed 1381750404 once ended an
idempotent writer with librdkafka's fatal OUT_OF_ORDER_SEQUENCE_NUMBER: a broker stopped past
its ZooKeeper session acted, once resumed, on a LeaderAndIsr the controller had superseded
meanwhile (fixed; docs/faults.md, tests/cluster/test_stale_leader_and_isr.py).

CI's run: :data:`CI_FAULTS` faults (each kind first, in a shuffled order, then any), stopped
after :data:`CI_SECONDS` at the latest: every kind once and two more, about 75 s of wall time
on two cores (it is ``serial``: nothing else runs beside it, so its time is the whole suite's;
three of each kind took 120 s, and CI has to stay under 20 minutes). The long run is
``STROM_NEMESIS_FAULTS=100`` (then no time bound) or ``python -m strom.testing.nemesis
--faults 100`` (docs/faults.md)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from strom.testing import netfault
from strom.testing.diskfault import tmpfs_available
from strom.testing.nemesis import FAULTS, run
from strom.testing.zookeeper import zookeeper_available

NO_NFT = netfault.available()
CI_FAULTS = len(FAULTS) + 2
CI_SECONDS = 140.0
ASKED = os.environ.get("STROM_NEMESIS_FAULTS")
pytestmark = [
    # CI's run ends near 75 s; a long one asked for takes ~6 s a fault
    pytest.mark.timeout(300 + (int(ASKED) * 15 if ASKED else 0)),
    pytest.mark.slow,
    pytest.mark.serial,  # kills, cuts and fills disks; and its recovery waits are timed
    pytest.mark.skipif(not zookeeper_available(), reason="apt-get install -y zookeeper"),
    pytest.mark.skipif(NO_NFT is not None, reason=NO_NFT or ""),
]


#: the seed CI runs (passed in CI's bounds; the long runs used 28100, 28200, 28300)
CI_SEED = 28300


def test_nemesis_every_fault_kind_nothing_lost(tmp_path: Path) -> None:
    asked = os.environ.get("STROM_NEMESIS_SEED", "")
    seed = random.randrange(1 << 31) if asked == "random" else int(asked or CI_SEED)
    faults = int(ASKED) if ASKED else CI_FAULTS
    bound = None if ASKED else CI_SECONDS
    print(f"nemesis seed {seed}: replay with STROM_NEMESIS_SEED={seed}")
    report = run(tmp_path, seed, faults=faults, duration_s=bound)
    kinds = {f.kind for f in report.faults}
    # without tmpfs mounts (not root) a disk cannot really fill: every other kind
    expected = set(FAULTS) if tmpfs_available() else set(FAULTS) - {"full_disk"}
    assert len(report.faults) == faults or (bound and len(report.faults) >= len(expected)), (
        f"seed {seed}: {len(report.faults)} faults in {report.seconds:.0f} s")
    if faults >= len(FAULTS):
        assert kinds == expected, f"seed {seed}: kinds struck {sorted(kinds)}"
    assert all(f.evidence for f in report.faults), f"seed {seed}: a fault without evidence"
    assert report.acked > 0 and report.txn_counts.get("txns_committed", 0) > 0
