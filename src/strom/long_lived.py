"""The cyclic garbage collector and the partitions' long-lived objects.

Why (issue 29): every hosted partition is some 45 objects the cyclic collector tracks (its log,
segments, indexes, paths, producer state, partition state). A full collection examines all of
them with the event loop stopped: at 10,000 partitions half a million objects, 0.3-1 s on a
2-core machine, with no request answered meanwhile (a worker thread's collection holds the
GIL just the same). Python runs one whenever the objects that became old since the last one
exceed a quarter of those already old, so adding 10,000 partitions ran about six while their
files were made, and typically one more within a second after: a producer's first second of
requests to the new partitions waited for it (the ack p99 of a 10,000-partition topic).

Policy, process-wide (the collector is):

- :func:`bulk`: while at least :data:`BULK` partitions are made or loaded at once (a topic
  created, partitions added, the logs opened at start-up), automatic collections are paused;
  reference counting frees what it always frees meanwhile.
- :func:`added`: once partitions are registered, and at least :data:`BULK` were added since
  the last freeze, every object tracked at that moment goes to the collector's permanent
  generation (``gc.freeze``); later collections examine only younger objects.

What it costs: a frozen object is never examined by the cyclic collector again. A partition's
objects are freed by reference counting when it is deleted (the unit test checks), so for them
it costs nothing; a garbage cycle of anything else that happens to exist at a freeze stays in
memory. Freezes are rare (one per :data:`BULK` partitions added), which bounds that.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Partitions made at once (or since the last freeze) for the policy to act.
BULK = 1000

_lock = threading.Lock()
_paused = 0  # paused() calls in progress (they may overlap: two topics created at once)
_was_enabled = True  # whether the collector was enabled when the first of them began
_added = 0  # partitions added since the last freeze
freezes = 0  # how many times objects were frozen (tests, diagnostics)


@contextmanager
def paused() -> Iterator[None]:
    """Automatic collections paused until the last overlapping call ends, then restored to
    what they were before the first."""
    global _paused, _was_enabled
    with _lock:
        _paused += 1
        if _paused == 1:
            _was_enabled = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _lock:
            _paused -= 1
            if _paused == 0 and _was_enabled:
                gc.enable()


@contextmanager
def bulk(partitions: int) -> Iterator[None]:
    """:func:`paused` while ``partitions`` partitions are made, if they are at least
    :data:`BULK`; nothing for fewer."""
    if partitions < BULK:
        yield
        return
    with paused():
        yield


def added(partitions: int) -> bool:
    """``partitions`` partitions were registered: freeze what is tracked now when
    :data:`BULK` or more were added since the last freeze. True if it froze."""
    global _added, freezes
    with _lock:
        _added += partitions
        if _added < BULK:
            return False
        _added = 0
        freezes += 1
    gc.freeze()
    return True
