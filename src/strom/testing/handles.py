"""Find and release the librdkafka handles alive in this process (see :mod:`strom.testing`).

A confluent-kafka ``Producer``, ``Consumer`` or ``AdminClient`` owns a librdkafka handle: native
threads (one named ``rdk:main`` per handle, one ``rdk:broker...`` per broker it knows) that keep
connecting to its bootstrap servers until the handle is destroyed. confluent-kafka destroys it
in ``Consumer.close()`` or when the Python object is freed. An object freed by its reference
count goes at once; one that is only reachable from a reference cycle waits for the cycle
collector, which may run many tests later. Cycles around clients are common in tests: a future
that failed holds its exception, whose traceback holds the frames (and through ``f_back`` their
callers) that hold the future and the client; a delivery callback closes over its own producer.
Until the collector runs, such a handle logs ``Connect to ... failed: Connection refused`` every
few hundred milliseconds for a broker its test stopped, and may even connect to a later test's
broker that was given the same port.

:func:`release_unreachable_handles` (run after each test by strom's own test suite) frees those
at once; :func:`live_handles` and :func:`describe_holders` name the ones something still holds.
"""

from __future__ import annotations

import gc
import os
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin

#: The thread name librdkafka gives the main thread of each handle (one per handle).
MAIN_THREAD_NAME = "rdk:main"
_TASKS = Path("/proc/self/task")
_HANDLE_TYPES = (confluent_kafka.Producer, confluent_kafka.Consumer,
                 confluent_kafka.admin.AdminClient)


def live_handle_count() -> int:
    """How many librdkafka handles this process has now.

    On Linux the count of threads named :data:`MAIN_THREAD_NAME` (``/proc/self/task``: a few
    small reads, cheap enough after every test; it also counts a handle whose Python object is
    already garbage, which is the point). A thread that a handle's main thread has just started
    bears its name for a moment, until it names itself (``rdk:broker...``): while a handle
    starts up or meets a new broker the count may be too high, never too low once the handle's
    constructor returned. Elsewhere, the count of :func:`live_handles`.
    """
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return len(live_handles())
    count = 0
    for task in tasks:
        try:
            name = (_TASKS / task / "comm").read_text().strip()
        except OSError:  # the thread ended while we looked
            continue
        count += name == MAIN_THREAD_NAME
    return count


def live_handles() -> list[object]:
    """The confluent-kafka client objects the garbage collector can see, reachable or not
    (a scan of every tracked object: tens of milliseconds)."""
    return [obj for obj in gc.get_objects() if isinstance(obj, _HANDLE_TYPES)]


def release_unreachable_handles() -> int:
    """Free the handles that nothing reachable holds any more; return how many are left (as
    :func:`live_handle_count` counts them: confirm with :func:`live_handles`).

    Collects garbage only when some handle is alive, so it costs next to nothing after a test
    that left none.
    """
    if live_handle_count() == 0:
        return 0
    gc.collect()
    return live_handle_count()


def drop_exception_locals(exc: BaseException | None) -> None:
    """Clear the local variables of the frames in the traceback of ``exc`` and of the
    exceptions chained to it (``__cause__``, ``__context__``).

    An exception kept after it was handled (``sys.last_value``, which pytest sets for a failed
    test) keeps every client its frames held; the exception, its traceback and its lines stay
    usable.
    """
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        tb = current.__traceback__
        while tb is not None:
            try:
                tb.tb_frame.clear()
            except RuntimeError:  # a frame still running keeps its locals
                pass
            else:
                # Reading f_locals (tracebacks' formatters do) leaves a copy of the locals in a
                # dict that clear() keeps on Python < 3.13; reading it again empties it.
                tb.tb_frame.f_locals  # noqa: B018
            tb = tb.tb_next
        todo += [current.__cause__, current.__context__]


def describe_holders(obj: object, ignore: Iterable[object] = ()) -> list[str]:
    """One line per object that refers to ``obj``: a module's global, an instance's attribute,
    a frame's local variable, a closure cell, a container. The caller's own frame is left
    out, and so is what ``ignore`` names (the caller's containers, such as the list it got from
    :func:`live_handles`)."""
    # No comprehension here names ``obj``: it would make ``obj`` a closure cell of this frame,
    # which would show up among its own holders.
    skip = {id(o) for o in ignore} | {id(sys._getframe()), id(sys._getframe(1))}
    lines = []
    for ref in gc.get_referrers(obj):
        if id(ref) in skip:
            continue
        if isinstance(ref, types.FrameType):
            code = ref.f_code
            names = _keys_of(ref.f_locals, obj)
            lines.append(f"local {', '.join(names) or '?'} of {code.co_name}() "
                         f"({code.co_filename}:{ref.f_lineno})")
        elif isinstance(ref, dict):
            names = _keys_of(ref, obj)
            owner = _owner_of(ref, skip)
            lines.append(f"{', '.join(names) or '?'} of {owner}")
        elif isinstance(ref, types.CellType):
            lines.append(f"a closure cell of {_owner_of(ref, skip)}")
        else:
            lines.append(f"a {type(ref).__qualname__}")
    return lines


def _keys_of(mapping: dict[Any, object], value: object) -> list[str]:
    """The keys under which ``mapping`` holds ``value`` itself."""
    keys = []
    for key, item in mapping.items():
        if item is value:
            keys.append(str(key))
    return keys


def _owner_of(ref: object, skip: set[int]) -> str:
    """What ``ref`` (a dict or a cell) belongs to: the module or the instance whose namespace it
    is, the frame whose locals it holds, the function whose closure it is in; or "?". (Functions
    also refer to their module's dict, as their globals: they do not own it.)"""
    for holder in gc.get_referrers(ref):
        if id(holder) in skip:
            continue
        if isinstance(holder, types.ModuleType) and vars(holder) is ref:
            return f"module {holder.__name__}"
        if isinstance(holder, types.FrameType) and (
                isinstance(ref, types.CellType) or holder.f_locals is ref):  # fmt: skip
            return f"the frame of {holder.f_code.co_name}() ({holder.f_code.co_filename})"
        if isinstance(holder, tuple):
            for func in gc.get_referrers(holder):
                if isinstance(func, types.FunctionType) and func.__closure__ is holder:
                    return f"function {func.__qualname__}()"
        if not isinstance(holder, type) and getattr(holder, "__dict__", None) is ref:
            return f"a {type(holder).__qualname__}"
    return "?"
