"""An event-loop probe for a strom broker process: where the loop's time goes, and how long
ready work waits for it. Profiling only: strom never imports it.

``benchmarks/partition_ack.py --probe`` starts strom with ``PYTHONPATH`` leading to a
directory holding a ``sitecustomize.py`` that calls :func:`install` (see
:func:`sitecustomize_dir`), so the broker runs unchanged but for these measurements:

- **loop lag**: a task sleeps :data:`BEAT` (5 ms) at a time; each wake-up's lateness is how
  long a callback that became ready then waited for the loop (the time a request waits
  before its turn). Reported as a distribution.
- **loop time per request type**: each request's handler coroutine is driven step by step
  and every step timed, by API (``handle:Metadata``...); the single-partition Produce path,
  ``data_received`` (framing plus the Produce requests answered inline) and the socket
  writes are timed as plain calls; so are periodic tasks (``periodic:...``) and the jobs of
  the flusher thread (wall and CPU: its Python work holds the GIL), and garbage collections
  (``gc genN``, any thread).
- **stalls**: a thread looks every 2 ms; when the heartbeat is 4 ms late it samples the
  loop thread's Python stack, and from ``/proc/self/task/<tid>/schedstat`` splits the stall
  into the loop thread running, waiting for a CPU (the machine's other jobs), and neither
  (blocked in a system call, or waiting for the GIL another thread holds).

``SIGUSR1`` starts a measurement window (resets everything), ``SIGUSR2`` writes the window's
figures as JSON to the path given to :func:`install`. The names it wraps are looked up when
the loop starts; one that is missing (the code moved) is skipped and listed under
``not_probed``. The probe costs the loop some time itself (the heartbeat, the timing calls):
compare runs that both had it.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from time import perf_counter
from typing import Any

BEAT = 0.005  # heartbeat period, seconds
STALL = 0.004  # a heartbeat this late is a stall (stack sampled)
API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
             9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
             18: "ApiVersions", 19: "CreateTopics", 22: "InitProducerId",
             32: "DescribeConfigs"}  # fmt: skip


class _State:
    def __init__(self) -> None:
        self.tid = 0
        self.not_probed: list[str] = []
        self.gen2: list[tuple[float, float]] = []  # (seconds since start, ms), never reset
        self.started = perf_counter()
        self.due: float | None = None
        self.reset()

    def reset(self) -> None:
        self.t0 = perf_counter()
        self.lags: list[float] = []
        self.acc: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
        # [due, length, stacks, schedstat at start, schedstat at end]
        self.stalls: list[list[Any]] = []
        self.sched0 = _schedstat(self.tid) if self.tid else (0.0, 0.0)


STATE = _State()


def _schedstat(tid: int) -> tuple[float, float]:
    """(seconds running, seconds runnable but waiting for a CPU) of thread ``tid``."""
    try:
        run, wait, _ = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(run) / 1e9, int(wait) / 1e9


def _add(key: str, seconds: float) -> None:
    entry = STATE.acc[key]
    entry[0] += 1
    entry[1] += seconds
    if seconds > entry[2]:
        entry[2] = seconds


class _Timed:
    """Awaits a coroutine, timing each step it runs on the loop."""

    __slots__ = ("coro", "key")

    def __init__(self, coro: Coroutine[Any, Any, Any], key: str) -> None:
        self.coro, self.key = coro, key

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self.coro
        value: Any = None
        error: BaseException | None = None
        while True:
            t = perf_counter()
            try:
                step = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as stop:
                _add(self.key, perf_counter() - t)
                return stop.value
            except BaseException:
                _add(self.key, perf_counter() - t)
                raise
            _add(self.key, perf_counter() - t)
            try:
                value, error = (yield step), None
            except BaseException as exc:  # noqa: BLE001 - passed on to the coroutine
                value, error = None, exc


def _timed_call(fn: Callable[..., Any], key: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(key, perf_counter() - t)

    return wrapper


_gc_started = [0.0]


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_started[0] = perf_counter()
        return
    seconds = perf_counter() - _gc_started[0]
    _add(f"gc gen{info['generation']} (any thread)", seconds)
    if info["generation"] == 2:
        STATE.gen2.append((round(perf_counter() - STATE.started, 3), round(seconds * 1e3, 1)))


def _patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    original = getattr(owner, name, None)
    if original is None:
        STATE.not_probed.append(f"{getattr(owner, '__name__', owner)}.{name}")
        return
    setattr(owner, name, make(original))


def _patch_strom() -> None:
    gc.callbacks.append(_on_gc)
    try:
        from strom.broker import server
        from strom.protocol.messages import peek_header
        from strom.storage import flusher
    except ImportError as exc:
        STATE.not_probed.append(f"import: {exc}")
        return
    try:  # periodic work: strom.periodic since the assembly (issue 19), Broker._every before
        from strom.periodic import Periodic as periodic_owner  # type: ignore[import-not-found]
        periodic_name = "every"
    except ImportError:
        from strom.broker.broker import Broker as periodic_owner  # type: ignore[import-not-found,no-redef]
        periodic_name = "_every"

    def handle(original: Any) -> Any:
        async def timed(self: Any, frame: bytes) -> Any:
            try:
                key = peek_header(frame)[0]
            except Exception:  # noqa: BLE001 - the handler reports it
                key = -1
            return await _Timed(original(self, frame), "handle:" + API_NAMES.get(key, str(key)))

        return timed

    conn = server.KafkaConnection
    _patch(conn, "handle", handle)
    _patch(conn, "data_received",
           lambda f: _timed_call(f, "data_received (framing + inline Produce)"))  # fmt: skip
    _patch(conn, "flush", lambda f: _timed_call(f, "socket write (flush)"))
    try:  # before issue 19 a separate single-partition Produce path; now every request begins
        from strom.broker import single_produce  # type: ignore[attr-defined]

        _patch(single_produce.SingleProducePath, "answer",
               lambda f: _timed_call(f, "Produce, single-partition path"))  # fmt: skip
    except ImportError:  # the connection core: KafkaConnection.begin / complete per request

        def begin(original: Any) -> Any:
            def timed(self: Any, frame: bytes, arrived: float) -> Any:
                t = perf_counter()
                try:
                    return original(self, frame, arrived)
                finally:
                    key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) > 1 else -1
                    _add("begin:" + API_NAMES.get(key, str(key)), perf_counter() - t)

            return timed

        _patch(conn, "begin", begin)
        _patch(conn, "complete",
               lambda f: lambda self, pending: _Timed(f(self, pending), "complete (waiting request)"))  # fmt: skip

    def every(original: Any) -> Any:
        def patched(self: Any, seconds: float, fn: Callable[[], Any]) -> Any:
            name = "periodic:" + getattr(fn, "__qualname__", str(fn))

            def timed() -> Any:
                t = perf_counter()
                try:
                    result = fn()
                finally:
                    _add(name, perf_counter() - t)
                if asyncio.iscoroutine(result):
                    return _drive(result, name)
                return result

            return original(self, seconds, timed)

        return patched

    _patch(periodic_owner, periodic_name, every)

    def execute(original: Any) -> Any:
        def timed(job: Any, fut: Any) -> Any:
            t, c = perf_counter(), time.thread_time()
            name = getattr(job, "__qualname__", str(job))
            try:
                return original(job, fut)
            finally:
                _add("flusher thread: " + name, perf_counter() - t)
                _add("flusher thread CPU: " + name, time.thread_time() - c)

        return staticmethod(timed)

    _patch(flusher.Flusher, "_execute", execute)


async def _drive(coro: Coroutine[Any, Any, Any], name: str) -> Any:
    return await _Timed(coro, name)


def _stack(frame: Any, limit: int = 10) -> str:
    out: list[str] = []
    while frame is not None and len(out) < limit:
        code = frame.f_code
        path = code.co_filename
        if "strom" in path or not out:
            short = path.split("/strom/", 1)[-1] if "/strom/" in path else path.rsplit("/", 1)[-1]
            out.append(f"{short}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return " <- ".join(out)


def _sampler(main_ident: int) -> None:
    readings: collections.deque[tuple[float, float, float]] = collections.deque(maxlen=64)
    current: float | None = None
    while True:
        time.sleep(0.002)
        now = perf_counter()
        readings.append((now, *_schedstat(STATE.tid)))
        due = STATE.due
        if due is None or now - due < STALL:
            continue
        frame = sys._current_frames().get(main_ident)
        if current != due:
            current = due
            start = next((r for r in reversed(readings) if r[0] <= due), readings[0])
            STATE.stalls.append([due, 0.0, [], start, None])
        stall = STATE.stalls[-1]
        stall[1] = now - due
        stall[2].append(_stack(frame) if frame is not None else "?")
        stall[4] = readings[-1]


async def _heartbeat() -> None:
    while True:
        due = perf_counter() + BEAT
        STATE.due = due
        await asyncio.sleep(BEAT)
        STATE.lags.append(perf_counter() - due)


def _split(stalls: list[list[Any]]) -> dict[str, float]:
    window = run = wait = 0.0
    for stall in stalls:
        if stall[4] is None:
            continue
        window += stall[4][0] - stall[3][0]
        run += stall[4][1] - stall[3][1]
        wait += stall[4][2] - stall[3][2]
    return {"ms": round(window * 1e3, 1), "running_ms": round(run * 1e3, 1),
            "waiting_for_cpu_ms": round(wait * 1e3, 1),
            "blocked_or_gil_ms": round((window - run - wait) * 1e3, 1)}  # fmt: skip


def report() -> dict[str, Any]:
    """The current window's figures."""
    lags = sorted(STATE.lags)
    wall = perf_counter() - STATE.t0

    def pct(q: float) -> float | None:
        if not lags:
            return None
        return round(lags[min(len(lags) - 1, int(q / 100 * len(lags)))] * 1e3, 2)

    run, wait = _schedstat(STATE.tid)
    worst = sorted(STATE.stalls, key=lambda s: -s[1])[:10]
    by_stack = collections.Counter(s for stall in STATE.stalls for s in stall[2])
    return {
        "wall_s": round(wall, 2),
        "loop_thread_running_s": round(run - STATE.sched0[0], 3),
        "loop_thread_waiting_for_cpu_s": round(wait - STATE.sched0[1], 3),
        "loop_lag_ms": {"heartbeats": len(lags), "p50": pct(50), "p90": pct(90), "p99": pct(99),
                        "p99.9": pct(99.9), "max": round(lags[-1] * 1e3, 2) if lags else None,
                        "over_5ms": sum(x > 0.005 for x in lags),
                        "over_20ms": sum(x > 0.02 for x in lags),
                        "over_100ms": sum(x > 0.1 for x in lags)},  # fmt: skip
        "loop_time": {key: {"count": int(v[0]), "total_ms": round(v[1] * 1e3, 1),
                            "mean_us": round(v[1] / v[0] * 1e6, 1) if v[0] else 0.0,
                            "max_ms": round(v[2] * 1e3, 2)}
                      for key, v in sorted(STATE.acc.items(), key=lambda kv: -kv[1][1])},
        "stalls": {"count": len(STATE.stalls), **_split(STATE.stalls)},
        "worst_stalls": [{**_split([s]), "stacks": list(dict.fromkeys(s[2]))[:3]} for s in worst],
        "stall_samples_by_stack": by_stack.most_common(10),
        "gen2_collections_since_start": STATE.gen2,
        "not_probed": STATE.not_probed,
    }


def install(path: str) -> None:
    """Wrap ``asyncio.run`` so the broker's loop starts the probe (called by the
    ``sitecustomize`` of :func:`sitecustomize_dir`)."""
    original_run = asyncio.run

    def run(main: Coroutine[Any, Any, Any], **kwargs: Any) -> Any:
        async def probed() -> Any:
            STATE.tid = threading.get_native_id()
            STATE.reset()
            _patch_strom()
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGUSR1, STATE.reset)
            loop.add_signal_handler(signal.SIGUSR2,
                                    lambda: Path(path).write_text(json.dumps(report())))  # fmt: skip
            beat = loop.create_task(_heartbeat())
            threading.Thread(target=_sampler, args=(threading.main_thread().ident,),
                             daemon=True, name="loop-probe").start()  # fmt: skip
            try:
                return await main
            finally:
                beat.cancel()

        return original_run(probed(), **kwargs)

    asyncio.run = run  # type: ignore[assignment]


def sitecustomize_dir() -> Path:
    """A new directory with a ``sitecustomize.py`` that installs this probe in a process whose
    ``PYTHONPATH`` starts with it, when ``STROM_LOOP_PROBE`` names the output file."""
    where = Path(tempfile.mkdtemp(prefix="strom-loop-probe-"))
    here = str(Path(__file__).resolve().parent)
    (where / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if os.environ.get('STROM_LOOP_PROBE'):\n"
        f"    sys.path.insert(0, {here!r})\n"
        "    import loop_probe\n"
        "    loop_probe.install(os.environ['STROM_LOOP_PROBE'])\n"
    )
    return where


def summarize_pyspy(path: Path, top: int = 12) -> dict[str, Any]:
    """The loop thread's samples of a ``py-spy record --format raw --threads --gil`` file:
    shares by request type (the same keys as :func:`report`'s loop time, from the stacks)
    and the functions the loop thread was in (self time)."""
    rows: list[tuple[list[str], int]] = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        rows.append((stack.split(";"), int(count)))
    loop_thread = next((f[0] for f, _ in rows if any("serve_cli" in x for x in f)), None)
    kinds: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, count in rows:
        if frames[0] != loop_thread:
            continue
        total += count
        joined = ";".join(frames)
        kinds[_kind(frames, joined)] += count
        leaves[frames[-1]] += count
    return {
        "loop_thread_samples": total,
        "by_kind_pct": {k: round(v * 100 / total, 1) for k, v in kinds.most_common(top)},
        "self_pct": {k: round(v * 100 / total, 1) for k, v in leaves.most_common(top)},
    }


def _kind(frames: list[str], joined: str) -> str:
    if "answer_inline" in joined or "SingleProducePath.answer" in joined:
        return "Produce, single-partition path"
    if "KafkaConnection.handle" in joined:
        for frame in frames:
            if "strom/broker/handlers/" in frame:
                return "handle:" + frame.split("strom/broker/handlers/")[1].split(".py")[0]
        return "handle: framing / encoding"
    for i, frame in enumerate(frames):
        if "_every.<locals>" in frame and i + 1 < len(frames):
            nxt = [f for f in frames[i + 1 :] if "loop_probe" not in f]
            return "periodic:" + (nxt[0].split(" (")[0] if nxt else "?")
    if "KafkaConnection.flush" in joined:
        return "socket write (flush)"
    if "data_received" in joined:
        return "data_received (framing)"
    if "_heartbeat" in joined or "loop_probe.py" in frames[-1]:
        return "the probe itself"
    return "event loop internals: " + frames[-1].split(" (")[0]


__all__ = ["install", "report", "sitecustomize_dir", "summarize_pyspy"]
