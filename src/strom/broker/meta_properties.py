"""Kafka's ``meta.properties``: which cluster and which node a data directory belongs to.

Format (Kafka's, version 1)::

    version=1
    cluster.id=<cluster id>
    node.id=<node id>

The data directory's file is written when the broker first joins a cluster (its cluster id
then survives restarts); every other log directory (``log.dirs``) has its own, written when
missing and refused when it names another cluster or node (a disk moved between brokers).
An older file naming ``broker.id`` instead of ``node.id`` is read the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from strom.config import ConfigError, parse_properties

FILE = "meta.properties"


def configured_log_dirs(values: Mapping[str, str], data_dir: Path) -> list[Path]:
    """The log directories a broker config names: ``log.dirs`` (comma-separated), else
    ``log.dir``, else ``data_dir`` (strom's default, one directory)."""
    raw = values.get("log.dirs") or values.get("log.dir") or ""
    dirs: list[Path] = []
    for item in raw.split(","):
        if item.strip() and Path(item.strip()) not in dirs:
            dirs.append(Path(item.strip()))
    return dirs or [Path(data_dir)]


def read(parent: Path, node_id: int) -> str | None:
    """The cluster id in ``parent``'s file (None in a new directory); ConfigError when the
    file is another node's."""
    path = parent / FILE
    if not path.exists():
        return None
    props = parse_properties(path.read_text(), str(path))
    stored = props.get("node.id", props.get("broker.id"))
    if stored is not None and int(stored) != node_id:
        raise ConfigError(
            f"{path} belongs to node.id={stored}, but this broker is node.id={node_id}"
        )
    return props["cluster.id"]


def write(parent: Path, cluster_id: str, node_id: int) -> None:
    (parent / FILE).write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")


def check_log_dirs(log_dirs: Iterable[Path], data_dir: Path, cluster_id: str,
                   node_id: int) -> None:  # fmt: skip
    """Every log directory other than the data dir has its own file (module doc)."""
    for parent in log_dirs:
        if parent.resolve() == data_dir.resolve():
            continue
        parent.mkdir(parents=True, exist_ok=True)
        found = read(parent, node_id)
        if found is None:
            write(parent, cluster_id, node_id)
        elif found != cluster_id:
            raise ConfigError(f"{parent / FILE} belongs to cluster {found},"
                              f" but this broker is in cluster {cluster_id}")  # fmt: skip
