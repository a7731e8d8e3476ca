"""Config validation, plugin lookup, worker properties and the offsets file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strom.connect.backing import FileOffsetBackingStore, MemoryConfigBackingStore
from strom.connect.config import ConfigDef, ConfigKey, at_least
from strom.connect.file import FileStreamSinkConnector, FileStreamSourceConnector
from strom.connect.herder import StandaloneHerder
from strom.connect.plugins import PluginNotFound, find_connector, find_converter, plugin_list
from strom.connect.standalone import load_connector_file
from strom.connect.worker_config import parse_properties, rest_address


def test_config_def_reports_every_problem() -> None:
    d = ConfigDef([ConfigKey("a", "INT", validator=at_least(1)),
                   ConfigKey("b", "BOOLEAN", False), ConfigKey("c")])
    errors = {v.name: v.errors for v in d.validate({"a": "0", "b": "yes"})}
    assert errors["a"] == ["Invalid value 0 for configuration a: Value must be at least 1"]
    assert "either true or false" in errors["b"][0]
    assert errors["c"] == ['Missing required configuration "c" which has no default value.']
    assert d.parse({"a": "3", "c": "x"}) == {"a": 3, "b": False, "c": "x"}


def test_connector_names_kafka_users_write() -> None:
    for name in ("FileStreamSource", "FileStreamSourceConnector",
                 "org.apache.kafka.connect.file.FileStreamSourceConnector",
                 "strom.connect.file.FileStreamSourceConnector"):
        assert find_connector(name) is FileStreamSourceConnector
    assert find_connector("FileStreamSink") is FileStreamSinkConnector
    assert find_converter("org.apache.kafka.connect.storage.StringConverter").__name__ == \
        "StringConverter"
    with pytest.raises(PluginNotFound, match="which name matches Nope"):
        find_connector("Nope")
    classes = {p["class"]: p["type"] for p in plugin_list()}
    assert classes["org.apache.kafka.connect.file.FileStreamSinkConnector"] == "sink"
    assert classes["org.apache.kafka.connect.file.FileStreamSourceConnector"] == "source"


def test_validate_sink_topics_rules(tmp_path: Path) -> None:
    h = StandaloneHerder("w", {}, FileOffsetBackingStore(tmp_path / "o"),
                         MemoryConfigBackingStore())
    result = h.validate({"connector.class": "FileStreamSink", "name": "s", "tasks.max": "0"})
    errors = {c["value"]["name"]: c["value"]["errors"] for c in result["configs"]}
    assert result["name"] == "org.apache.kafka.connect.file.FileStreamSinkConnector"
    assert errors["topics"] == ["Must configure one of topics or topics.regex"]
    assert errors["file"] == ['Missing required configuration "file" which has no default value.']
    assert errors["tasks.max"] == ["Invalid value 0 for configuration tasks.max: "
                                   "Value must be at least 1"]
    assert result["error_count"] == 4
    assert "Common" in result["groups"]


def test_properties_parser() -> None:
    text = "# comment\n! other\na=1\nb : two words\nc three\nlong=x\\\n   y\nk\\=e=v\nempty=\n"
    assert parse_properties(text) == {"a": "1", "b": "two words", "c": "three",
                                      "long": "xy", "k=e": "v", "empty": ""}
    assert rest_address({}) == ("127.0.0.1", 8083)
    assert rest_address({"listeners": "http://0.0.0.0:9000"}) == ("0.0.0.0", 9000)
    assert rest_address({"rest.port": "8090"}) == ("127.0.0.1", 8090)


def test_connector_files_json_and_properties(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"name": "a", "config": {"tasks.max": 2}}))
    (tmp_path / "b.properties").write_text("name=b\ntopic=t\n")
    assert load_connector_file(tmp_path / "a.json") == ("a", {"tasks.max": "2"})
    assert load_connector_file(tmp_path / "b.properties") == ("b", {"name": "b", "topic": "t"})


def test_offsets_file_is_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "offsets"
    store = FileOffsetBackingStore(path)
    store.put_all("c", {json.dumps({"filename": "f"}): {"position": 10}})
    store.put_all("c", {json.dumps({"filename": "f"}): {"position": 20}})
    store.put_all("d", {json.dumps({"filename": "g"}): {"position": 1}})
    assert not (tmp_path / "offsets.tmp").exists()
    again = FileOffsetBackingStore(path)
    assert again.get("c", {"filename": "f"}) == {"position": 20}
    assert again.get("d", {"filename": "g"}) == {"position": 1}
    again.forget("c")
    assert FileOffsetBackingStore(path).get("c", {"filename": "f"}) is None
