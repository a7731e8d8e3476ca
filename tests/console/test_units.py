"""The console's pure parts: rendering, queries, plans, the sparkline, the command line."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.datastructures import QueryParams

from strom.admin.errors import AdminError
from strom.console.messages import Query, parse_headers, render
from strom.console.routes_groups import parse_plan
from strom.console.server import parse_listen
from strom.console.throughput import ThroughputSampler, sparkline_points
from strom.testing import free_port
from tests.console.helpers import ConsoleProcess, eventually


def test_render_kinds() -> None:
    assert render(None, "auto") == ("null", None)
    assert render(b'{"a":[1,2]}', "auto") == ("json", '{\n  "a": [\n    1,\n    2\n  ]\n}')
    assert render(b"42", "auto") == ("text", "42")  # a bare number stays text unless asked
    assert render(b"42", "json") == ("json", "42")
    assert render("héllo".encode(), "auto") == ("text", "héllo")
    assert render(b"\x00\x01", "auto") == ("hex", "00 01")  # decodes, but not printable
    assert render(b"\xff\xfe", "auto") == ("hex", "ff fe")
    assert render(b"\xff", "text") == ("text", "\ufffd")
    assert render(b"ab", "hex") == ("hex", "61 62")
    assert render(b"not json", "json") == ("text", "not json")


def test_query_round_trips_through_the_url() -> None:
    params = QueryParams("partition=2&partition=0&mode=offset&offset=5&limit=20&key=k&view=hex"
                         "&cursor=0:7,2:9")
    q = Query.from_params("t", params)
    assert (q.partitions, q.mode, q.offset, q.limit, q.key, q.view, q.cursor) == (
        (0, 2), "offset", 5, 20, "k", "hex", ((0, 7), (2, 9)))
    assert Query.from_params("t", QueryParams(q.params())) == q
    again = Query.from_params("t", QueryParams(q.params(cursor=((0, 8),))))
    assert again.cursor == ((0, 8),)
    for bad, message in [("mode=soon", "unknown start"), ("limit=0", "between 1 and 500"),
                         ("offset=x", "expected an integer"), ("view=xml", "unknown view")]:
        with pytest.raises(AdminError, match=message):
            Query.from_params("t", QueryParams(bad))


def test_parse_headers_and_plan() -> None:
    assert parse_headers("a=1\n\nb = x=y\n") == [("a", b"1"), ("b", b" x=y")]
    with pytest.raises(AdminError, match="expected NAME=VALUE"):
        parse_headers("novalue")
    assert parse_plan("t.a-1:0:5\nt.a-1:10:0\n") == {("t.a-1", 0): 5, ("t.a-1", 10): 0}
    for bad in ("t:0", ":0:1", "t:x:1", "t:0:y"):
        with pytest.raises(AdminError, match="invalid reset plan line"):
            parse_plan(bad)


def test_sampler_rates_and_sparkline() -> None:
    now = [0.0]
    totals = iter([100, 150, 150, 40, 90])  # 40: a topic was deleted between samples
    sampler = ThroughputSampler(lambda: next(totals), interval=5, clock=lambda: now[0])
    for _ in range(5):
        sampler.sample()
        now[0] += 5
    assert sampler.rates() == [10.0, 0.0, 0.0, 10.0]
    points = sparkline_points([0.0, 5.0, 10.0], width=100, height=40)
    assert points == "0.0,38.0 50.0,20.0 100.0,2.0"
    assert sparkline_points([]) == ""
    assert sparkline_points([3.0], width=100, height=40) == "0.0,2.0 100.0,2.0"


def test_parse_listen() -> None:
    assert parse_listen("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_listen(":8081") == ("127.0.0.1", 8081)
    assert parse_listen("8082") == ("127.0.0.1", 8082)
    assert parse_listen("[::1]:8083") == ("::1", 8083)
    for bad in ("host:http", "1.2.3.4:70000"):
        with pytest.raises(AdminError):
            parse_listen(bad)


def strom(*args: str, pre: str = "") -> subprocess.CompletedProcess[str]:
    code = f"{pre}import sys; from strom.cli.main import main; sys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_console_without_the_extra_names_what_is_missing() -> None:
    result = strom("console", pre="import sys; sys.modules['jinja2'] = None; ")
    assert result.returncode == 1
    assert result.stderr == ("strom: error: strom console needs the 'console' extra "
                             "(pip install 'strom[console]'): jinja2 not installed\n")


def test_console_refuses_bad_addresses_in_one_line() -> None:
    port = free_port()
    result = strom("console", "-b", f"127.0.0.1:{port}", "--timeout", "2",
                   "--listen", f"127.0.0.1:{free_port()}")
    assert result.returncode == 1
    assert result.stderr == (f"strom: error: cannot connect to the broker at 127.0.0.1:{port}: "
                             "connection refused (is a broker running there?)\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        result = strom("console", "--listen", f"127.0.0.1:{busy}")
    assert result.returncode == 1
    assert result.stderr == (f"strom: error: cannot listen on 127.0.0.1:{busy}: "
                             "Address already in use\n")
    bad = strom("console", "--listen", "127.0.0.1:notaport")
    assert bad.returncode == 1
    assert bad.stderr == ("strom: error: invalid --listen '127.0.0.1:notaport': "
                          "expected HOST:PORT\n")


def test_open_starts_the_browser_on_the_console(broker: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    opener = tmp_path / "opener.py"
    opened = tmp_path / "opened.txt"
    opener.write_text("import pathlib, sys\npathlib.Path(sys.argv[1]).write_text(sys.argv[2])\n")
    monkeypatch.setenv("BROWSER", f"{sys.executable} {opener} {opened} %s")
    with ConsoleProcess(tmp_path, broker.bootstrap, ["--open"]) as proc:
        url = eventually(lambda: opened.exists() and opened.read_text(), "the browser opened")
        assert url == f"{proc.url}/"
        status, body = proc.request("GET", "/")
        assert status == 200 and broker.bootstrap in body
        assert proc.stop() == 0  # SIGTERM: a clean exit
    assert proc.log_tail() == (
        f"strom console on {proc.url}/ (brokers {broker.bootstrap})\n"
        f"no login (--users-file not given): only this machine can reach {proc.url}/")
