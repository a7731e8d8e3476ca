"""Running the JVM test module (``jvm/``, Maven) from pytest.

* :func:`classpath` builds ``jvm/`` once per test session with Maven (``test-compile``, then the
  resolved dependency jars listed in ``jvm/target/classpath.txt``): the first run on a clean
  machine resolves Kafka's 4.x jars from Maven Central into ``~/.m2``, later ones only compile.
  A file lock keeps parallel pytest workers from building at once.
* :class:`JavaProcess` runs one JVM (a JUnit launcher, a Kafka tool, a Streams app) as a child
  process with its output in a log file, and stops it by its PID (SIGTERM, then SIGKILL; or
  SIGKILL at once for the kill -9 tests), always within a deadline.
* :func:`run_junit` runs JUnit test classes of ``jvm/src/test`` in one JVM against a broker and
  returns each test's outcome from the launcher's XML report; :func:`junit_tests` lists the
  test methods of a class from its source, so pytest can name one test per JUnit method at
  collection time.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JVM_DIR = ROOT / "jvm"
TEST_SOURCES = JVM_DIR / "src" / "test" / "java" / "io" / "strom" / "jvm"
PACKAGE = "io.strom.jvm"
#: JVM flags for short-lived test JVMs on a 2-core machine: C1 only (quicker to warm), the
#: serial collector, a bounded heap; Kafka's own log lines at WARN on stderr.
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx512m", "-Xss1m",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
             "-Dorg.slf4j.simpleLogger.logFile=System.err")  # fmt: skip


def tools_available() -> bool:
    return shutil.which("java") is not None and shutil.which("mvn") is not None


@cache
def classpath() -> str:
    """Compile ``jvm/`` (once per session) and return its test classpath."""
    if not tools_available():
        pytest.skip("the JVM tests need java (17+) and mvn (Debian: default-jdk maven)")
    target = JVM_DIR / "target"
    target.mkdir(exist_ok=True)
    listing = target / "classpath.txt"
    with open(target / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(
            ["mvn", "-B", "-q", "-f", str(JVM_DIR / "pom.xml"), "test-compile",
             "dependency:build-classpath", f"-Dmdep.outputFile={listing}",
             "-Dmdep.includeScope=test"],
            capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"building jvm/ failed:\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
    jars = listing.read_text().strip()
    return os.pathsep.join([str(target / "test-classes"), str(target / "classes"), jars])


class JavaProcess:
    """One JVM child process running ``main_class`` with ``args``; output in ``log_file``.

    Stopped by its PID: :meth:`stop` sends SIGTERM (a JVM runs its shutdown hooks: a Streams app
    closes cleanly) and SIGKILL after a timeout; :meth:`kill` is kill -9.
    """

    def __init__(self, main_class: str, args: Sequence[str], log_file: Path, *,
                 properties: Mapping[str, str] | None = None, stdin: Path | None = None,
                 extra_flags: Sequence[str] = ()) -> None:  # fmt: skip
        self.command = ["java", *JVM_FLAGS, *extra_flags,
                        *(f"-D{k}={v}" for k, v in (properties or {}).items()),
                        "-cp", classpath(), main_class, *args]  # fmt: skip
        self.log_file = log_file
        self.stdin = stdin
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> JavaProcess:
        log = open(self.log_file, "ab")  # noqa: SIM115 - the child owns it until it exits
        src = open(self.stdin, "rb") if self.stdin else subprocess.DEVNULL  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=src, cwd=JVM_DIR)  # fmt: skip
        finally:
            log.close()
            if self.stdin:
                src.close()  # type: ignore[union-attr]
        return self

    def wait(self, timeout: float) -> int:
        """The exit code; kill -9 and AssertionError when it has not exited within ``timeout``."""
        assert self._proc is not None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.command[-1]}: still running after {timeout:g} s, killed;"
                                 f" its log:\n{self.log_tail()}") from None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        return self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: int, timeout: float) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        return proc.returncode

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> JavaProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill() if self.running() else None


_TEST_METHOD = re.compile(r"@(?:Test|ParameterizedTest)\b[^;{]*?\bvoid\s+(\w+)\s*\(", re.S)


def junit_tests(test_class: str) -> list[str]:
    """The JUnit test methods of ``TEST_SOURCES/<test_class>.java``, in source order."""
    source = (TEST_SOURCES / f"{test_class}.java").read_text()
    return _TEST_METHOD.findall(source)


@dataclass(frozen=True)
class Outcome:
    """One JUnit test case (a parameterized method has one per parameter)."""

    test_class: str
    method: str
    name: str
    seconds: float
    failure: str | None  # the message and stack of a failure or error, None when it passed
    skipped: bool

    @property
    def passed(self) -> bool:
        return self.failure is None and not self.skipped


def run_junit(classes: Sequence[str], properties: Mapping[str, str], work_dir: Path,
              timeout: float) -> list[Outcome]:  # fmt: skip
    """Run the JUnit ``classes`` (simple names) in one JVM; every test case's outcome."""
    reports = work_dir / "junit-reports"
    reports.mkdir(parents=True, exist_ok=True)
    args = ["execute", "--disable-banner", "--disable-ansi-colors", "--details=summary",
            f"--reports-dir={reports}",
            # a test that hangs fails alone, the others still run
            "--config=junit.jupiter.execution.timeout.default=150s",
            *(f"--select-class={PACKAGE}.{c}" for c in classes)]  # fmt: skip
    launcher = JavaProcess("org.junit.platform.console.ConsoleLauncher", args,
                           work_dir / "junit.log", properties=properties)  # fmt: skip
    started = time.monotonic()
    with launcher:
        launcher.wait(timeout)
    report = reports / "TEST-junit-jupiter.xml"
    if not report.exists():
        raise AssertionError(f"JUnit wrote no report after {time.monotonic() - started:.0f} s:"
                             f"\n{launcher.log_tail()}")  # fmt: skip
    return parse_report(report)


def parse_report(path: Path) -> list[Outcome]:
    outcomes = []
    for case in ET.parse(path).getroot().iter("testcase"):
        failure = None
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                failure = f"{node.get('message') or ''}\n{(node.text or '')[:3000]}"
        outcomes.append(Outcome(
            test_class=(case.get("classname") or "").rsplit(".", 1)[-1],
            method=(case.get("name") or "").split("(", 1)[0],
            name=case.get("name") or "",
            seconds=float(case.get("time") or 0),
            failure=failure,
            skipped=case.find("skipped") is not None,
        ))  # fmt: skip
    return outcomes


def check_outcomes(outcomes: Sequence[Outcome], test_class: str, method: str) -> None:
    """Assert the JUnit method ran and every one of its cases passed."""
    mine = [o for o in outcomes if o.test_class == test_class and o.method == method]
    assert mine, f"JUnit did not run {test_class}.{method}"
    failed = [o for o in mine if not o.passed]
    assert not failed, "\n\n".join(
        f"{o.test_class}.{o.name} ({o.seconds:.1f} s): "
        + ("skipped" if o.skipped else str(o.failure)) for o in failed)  # fmt: skip
