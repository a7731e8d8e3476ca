#!/usr/bin/env python3
"""Generate ``src/strom/kafka_configs.json``: Kafka's broker and topic config catalogue.

The catalogue is read from one Kafka release's own config definitions, never written by hand:
the release's jars (``org.apache.kafka:kafka_2.13`` and its dependencies, resolved by Maven
from Maven Central) run ``tools/KafkaConfigCatalogue.java`` (Java's single-file source
launcher), which prints, for every name of ``KafkaConfig.configDef()`` (and the dynamic-only
``QuotaConfig.brokerQuotaConfigs()``), of ``LogConfig`` and of ``GroupConfig`` (KIP-848's
group configs): its
type, default (as Kafka prints it, ``ConfigDef.convertToString``), validator text, importance,
whether it is internal and its documentation; for broker configs the dynamic update mode
(``DynamicBrokerConfig.dynamicConfigUpdateModes()``: per-broker, cluster-wide, else
read-only); for topic configs their broker synonyms (``ServerTopicConfigSynonyms``). This script
adds nothing but sorting and the header.

Usage (needs ``java`` >= 17 and ``mvn``)::

    python tools/gen_kafka_configs.py [--release 4.3.1] [--jars DIR] [--out PATH]

``--jars``: a directory already holding the release's jars (skips Maven). Re-run it to move
to another release; the JSON records the release it came from (``kafka_release``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMPER = ROOT / "tools" / "KafkaConfigCatalogue.java"
OUT = ROOT / "src" / "strom" / "kafka_configs.json"
POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>strom.tools</groupId><artifactId>kafka-configs</artifactId><version>1</version>
<dependencies><dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
<version>{release}</version></dependency></dependencies></project>
"""


def resolve_jars(release: str, into: Path) -> Path:
    """The release's jars and dependencies, copied into ``into/jars`` by Maven."""
    (into / "pom.xml").write_text(POM.format(release=release))
    jars = into / "jars"
    subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies",
                    f"-DoutputDirectory={jars}"], cwd=into, check=True)  # fmt: skip
    return jars


def dump(jars: Path) -> dict:
    classpath = ":".join(str(p) for p in sorted(jars.glob("*.jar")))
    done = subprocess.run(["java", "-cp", classpath, str(DUMPER)], check=True,
                          capture_output=True, text=True)  # fmt: skip
    for line in done.stderr.splitlines():
        if not line.startswith("SLF4J"):
            print(line, file=sys.stderr)
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="4.3.1")
    parser.add_argument("--jars", type=Path, help="a directory with the release's jars")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        jars = args.jars or resolve_jars(args.release, Path(tmp))
        raw = dump(jars)
    if raw["kafka_release"] != args.release:
        print(f"the jars are Kafka {raw['kafka_release']}, not {args.release}", file=sys.stderr)
        return 1
    catalogue = {
        "kafka_release": raw["kafka_release"],
        "generated_by": "tools/gen_kafka_configs.py (tools/KafkaConfigCatalogue.java)",
        "broker": dict(sorted(raw["broker"].items())),
        "topic": dict(sorted(raw["topic"].items())),
        "group": dict(sorted(raw["group"].items())),
    }
    args.out.write_text(json.dumps(catalogue, indent=1, sort_keys=False) + "\n")
    print(f"{args.out}: Kafka {catalogue['kafka_release']}, {len(catalogue['broker'])} broker, "
          f"{len(catalogue['topic'])} topic and {len(catalogue['group'])} group configs")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
