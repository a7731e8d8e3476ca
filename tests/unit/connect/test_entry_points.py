"""Third-party connectors are found through the ``strom.connectors`` entry points."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from strom.connect.plugins import find_connector, plugin_list

PLUGIN = '''
from strom.connect import ConfigDef, SourceConnector, SourceTask


class EchoTask(SourceTask):
    def start(self, config): pass
    def poll(self): return None
    def stop(self): pass


class EchoSourceConnector(SourceConnector):
    @classmethod
    def config_def(cls): return ConfigDef()
    @classmethod
    def version(cls): return "9.9"
    def start(self, config): pass
    def task_class(self): return EchoTask
    def task_configs(self, max_tasks): return [{}]
'''


def test_entry_point_connector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "echo_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "echo_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[strom.connectors]\necho = echo_plugin:EchoSourceConnector\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        cls = find_connector("echo")
        assert cls.__name__ == "EchoSourceConnector"
        assert find_connector("EchoSource") is cls
        assert find_connector("echo_plugin.EchoSourceConnector") is cls
        assert {"class": "echo_plugin.EchoSourceConnector", "type": "source",
                "version": "9.9"} in plugin_list()
    finally:
        sys.modules.pop("echo_plugin", None)
