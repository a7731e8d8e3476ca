"""Disk faults inside a broker process: I/O errors and stalls on chosen files, for tests.

A real failing or stalling disk needs device-mapper's ``error``, ``flakey`` or ``delay``
targets, which need a kernel module and privileges a test machine may not have (a full disk
needs neither: a small ``tmpfs`` is one, see :func:`tmpfs`). So a test injects the fault one
level up, in the one place all of strom's storage I/O goes through
(:mod:`strom.storage.fileio`): a broker started with :meth:`DiskFaults.environment` runs
:func:`install` at start-up (:mod:`strom.testing.site_hooks`: a ``sitecustomize`` module on
its ``PYTHONPATH``; strom itself never imports this module), which wraps those functions. The test then arms faults
while the broker runs::

    faults = DiskFaults(tmp_path / "faults")
    with BrokerProcess(tmp_path / "data", env=faults.environment()) as broker:
        rule = faults.fail(errno.EIO, ops=("write",), path="orders-0")
        ...                                   # appends to orders-0 now fail with EIO
        assert faults.struck(rule) > 0        # the fault really happened

Control files in the test's directory (written by the test, read by the broker every 10 ms):
``rules.json`` ``{"generation": n, "rules": [{"id", "ops", "path", "errno", "delay",
"count"}]}``; the broker answers ``armed`` (the generation it applied, so :meth:`DiskFaults.set`
returns once the fault is live) and ``struck.json`` (``{rule id: times it struck}``).

A rule matches a call whose operation is in ``ops`` (``open``, ``write``, ``read``,
``fsync``, ``truncate``, ``rename``) on a file whose path contains ``path`` (any file when
empty; a ``re:``-prefixed ``path`` is a regular expression searched in it instead, e.g.
``"re:/orders-0/\\d+\\.log$"`` for the partition's segment files only): it sleeps ``delay`` seconds, then raises ``OSError(errno)`` unless ``errno`` is 0
(then the call goes on: a stall). ``count`` bounds how many times it strikes (None: always).
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import itertools
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from strom.storage import fileio
from strom.testing import site_hooks

ENV = site_hooks.DISK_ENV
OPS = ("open", "write", "read", "fsync", "truncate", "rename")


@dataclass(frozen=True)
class Rule:
    id: int
    ops: tuple[str, ...]
    path: str = ""
    errno: int = 0
    delay: float = 0.0
    count: int | None = None


class DiskFaults:
    """The test's side: arm, clear and count the faults of the brokers started with
    :meth:`environment` (one control directory can serve several brokers: restrict rules by
    ``path`` then, e.g. to one broker's data directory)."""

    def __init__(self, control_dir: Path) -> None:
        self.dir = Path(control_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._ids = itertools.count(1)
        self._generation = 0
        self.rules: list[Rule] = []
        self._publish()

    def environment(self) -> dict[str, str]:
        """The variables a broker needs to take faults from this directory."""
        return site_hooks.environment(self.dir, ENV, self.dir)

    def fail(self, code: int = errno_mod.EIO, *, ops: Sequence[str] = ("write", "fsync"),
             path: str = "", count: int | None = None, delay: float = 0.0,
             wait: float | None = 10.0) -> int:  # fmt: skip
        """Make matching calls raise ``OSError(code)``; the rule's id."""
        return self._add(Rule(next(self._ids), tuple(ops), path, code, delay, count), wait)

    def stall(self, seconds: float, *, ops: Sequence[str] = ("fsync",), path: str = "",
              count: int | None = None, wait: float | None = 10.0) -> int:  # fmt: skip
        """Make matching calls take ``seconds`` longer (then succeed); the rule's id."""
        return self._add(Rule(next(self._ids), tuple(ops), path, 0, seconds, count), wait)

    def clear(self, rule: int | None = None, *, wait: float | None = 10.0) -> None:
        """Remove one rule (or all); waits until the brokers applied it unless ``wait`` is
        None."""
        self.rules = [r for r in self.rules if rule is not None and r.id != rule]
        self._publish()
        if wait is not None:
            self.wait_armed(wait)

    def struck(self, rule: int | None = None) -> int:
        """How many times ``rule`` (or any rule) struck, summed over the brokers."""
        total = 0
        for path in self.dir.glob("struck-*.json"):
            try:
                counts = json.loads(path.read_text() or "{}")
            except (OSError, ValueError):
                continue
            total += sum(n for k, n in counts.items() if rule is None or int(k) == rule)
        return total

    def armed(self) -> list[int]:
        """The generation each broker applied last (one entry per broker process seen)."""
        out = []
        for path in self.dir.glob("armed-*"):
            with contextlib.suppress(OSError, ValueError):
                out.append(int(path.read_text()))
        return out

    def wait_armed(self, timeout: float = 10.0) -> None:
        """Until every live broker using this directory applied the current rules."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [p for p in self.dir.glob("armed-*") if _alive(p.name.partition("-")[2])]
            gens = []
            for p in live:
                with contextlib.suppress(OSError, ValueError):
                    gens.append(int(p.read_text()))
            if gens and all(g >= self._generation for g in gens):
                return
            time.sleep(0.01)
        raise TimeoutError(f"no broker applied disk-fault generation {self._generation} in "
                           f"{timeout} s")  # fmt: skip

    def _add(self, rule: Rule, wait: float | None) -> int:
        for op in rule.ops:
            if op not in OPS:
                raise ValueError(f"unknown operation {op!r}: one of {OPS}")
        self.rules.append(rule)
        self._publish()
        if wait is not None:
            self.wait_armed(wait)
        return rule.id

    def _publish(self) -> None:
        self._generation += 1
        doc = {"generation": self._generation, "rules": [asdict(r) for r in self.rules]}
        tmp = self.dir / "rules.json.tmp"
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.dir / "rules.json")


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


# --- the broker's side ------------------------------------------------------------------------


class _Injector:
    """Wraps :mod:`strom.storage.fileio` in this process (see the module doc)."""

    def __init__(self, control_dir: Path) -> None:
        self.dir = control_dir
        self.rules: list[dict[str, Any]] = []
        self.left: dict[int, int | None] = {}  # rule id -> strikes left
        self.struck: dict[int, int] = {}
        self.generation = -1
        self.mtime = 0
        self.lock = threading.Lock()
        self.paths: dict[int, str] = {}  # descriptor -> path, of those opened through fileio
        self.pid = os.getpid()

    def load(self) -> None:
        try:
            stat = os.stat(self.dir / "rules.json")
            if stat.st_mtime_ns == self.mtime:
                return
            doc = json.loads((self.dir / "rules.json").read_text())
        except (OSError, ValueError):
            return
        with self.lock:
            self.mtime = stat.st_mtime_ns
            self.rules = list(doc.get("rules", ()))
            self.left = {int(r["id"]): self.left.get(int(r["id"]), r.get("count"))
                         for r in self.rules}  # fmt: skip
            self.generation = int(doc.get("generation", 0))
        _write(self.dir / f"armed-{self.pid}", str(self.generation))

    def check(self, op: str, path: str) -> None:
        """Apply the first rule matching ``op`` on ``path``: sleep, raise, or nothing."""
        if not self.rules:
            return
        hit = None
        with self.lock:
            for rule in self.rules:
                if op not in rule["ops"] or not _matches(rule["path"], path):
                    continue
                rid = int(rule["id"])
                left = self.left.get(rid)
                if left is not None:
                    if left <= 0:
                        continue
                    self.left[rid] = left - 1
                self.struck[rid] = self.struck.get(rid, 0) + 1
                hit = rule
                # under the lock: threads striking at once (the loop, the flusher, writer
                # threads) must not write older counts over newer ones
                _write(self.dir / f"struck-{self.pid}.json",
                       json.dumps({str(k): v for k, v in self.struck.items()}))  # fmt: skip
                break
        if hit is None:
            return
        if hit["delay"]:
            time.sleep(float(hit["delay"]))
        if hit["errno"]:
            code = int(hit["errno"])
            raise OSError(code, f"{os.strerror(code)} (injected)", path)

    def watch(self) -> None:
        while True:
            self.load()
            time.sleep(0.01)


def _matches(pattern: str, path: str) -> bool:
    if not pattern:
        return True
    if pattern.startswith("re:"):
        return re.search(pattern[3:], path) is not None
    return pattern in path


def _write(path: Path, text: str) -> None:
    """Write a control file with the real ``os`` calls (never through the wrapped ones); the
    temporary file is the calling thread's own (two threads sharing one would rename it from
    under each other, and that ``OSError`` would reach the storage call being checked)."""
    tmp = path.with_name(f"{path.name}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


_installed: _Injector | None = None


def install(control_dir: str | Path) -> None:
    """Wrap :mod:`strom.storage.fileio` so that the rules in ``control_dir`` apply to this
    process (the ``sitecustomize`` of :meth:`DiskFaults.environment` calls it)."""
    global _installed
    if _installed is not None:
        return
    inj = _installed = _Injector(Path(control_dir))
    inj.load()
    paths = inj.paths
    check = inj.check

    def fd_path(fd: int) -> str:
        return paths.get(fd, "")

    real = {name: getattr(fileio, name) for name in fileio.NAMES}

    def open_fd(path: Any, flags: int, mode: int = 0o777, *a: Any, **k: Any) -> int:
        check("open", os.fspath(path))
        fd = int(real["open_fd"](path, flags, mode, *a, **k))
        paths[fd] = os.fspath(path)
        return fd

    def close(fd: int) -> None:
        paths.pop(fd, None)
        real["close"](fd)

    def by_fd(name: str, op: str) -> Callable[..., Any]:
        fn = real[name]

        def wrapped(fd: int, *args: Any) -> Any:
            check(op, fd_path(fd))
            return fn(fd, *args)

        return wrapped

    def by_path(name: str, op: str) -> Callable[..., Any]:
        fn = real[name]

        def wrapped(path: Any, *args: Any) -> Any:
            check(op, os.fspath(path))
            return fn(path, *args)

        return wrapped

    fileio.open_fd = open_fd
    fileio.close = close
    fileio.pwrite = by_fd("pwrite", "write")
    fileio.pwritev = by_fd("pwritev", "write")
    fileio.write = by_fd("write", "write")
    fileio.pread = by_fd("pread", "read")
    fileio.fsync = by_fd("fsync", "fsync")
    fileio.ftruncate = by_fd("ftruncate", "truncate")
    fileio.truncate = by_path("truncate", "truncate")
    fileio.replace = by_path("replace", "rename")
    fileio.rename = by_path("rename", "rename")
    threading.Thread(target=inj.watch, name="strom-diskfault", daemon=True).start()


# --- a full disk ------------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A ``tmpfs`` of ``size`` (``"16m"``) mounted on ``path`` for the block (root only):
    a disk a test can really fill (:func:`fill`). Always unmounted (lazily if busy)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True, capture_output=True)  # fmt: skip
    try:
        yield path
    finally:
        done = subprocess.run(["umount", str(path)], capture_output=True)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def tmpfs_available() -> bool:
    """Whether this process may mount a tmpfs (root in a sandbox that allows it)."""
    if os.geteuid() != 0:
        return False
    probe = Path(f"/tmp/strom-tmpfs-probe-{os.getpid()}")
    try:
        with tmpfs(probe, "64k"):
            return True
    except (OSError, subprocess.CalledProcessError):
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def fill(path: Path, leave: int = 0, name: str = "filler") -> Path:
    """Fill the file system holding ``path`` with a file ``path/name`` until at most ``leave``
    bytes are free (the disk really is full: the last write failed with ENOSPC); its path.
    Remove the file to give the space back."""
    target = path / name
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        chunk = b"\0" * (1 << 20)
        while True:
            free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
            want = free - leave
            if want <= 0:
                break
            try:
                os.write(fd, chunk[: min(len(chunk), want)])
            except OSError as exc:
                if exc.errno != errno_mod.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return target


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
