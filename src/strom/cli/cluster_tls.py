"""``strom cluster up --security``: the CA and certificates of a local secured cluster.

Everything lives in ``<data-dir>/tls/`` (keys mode 0600): ``ca.pem`` (the CA certificate, a
PEM trust store), ``broker.pem`` (the brokers' key and chain, Kafka's PEM
``ssl.keystore.location``; its names: the cluster's host, ``localhost``, ``127.0.0.1``),
``client.crt`` / ``client.key`` (a client certificate, ``CN=strom-admin``, for librdkafka) and
``client.properties`` (librdkafka settings naming them). The CA's own key is not kept: nothing
is issued after ``up``. For tries on one machine, never for production.

Each broker then has one listener, ``SSL://<host>:<port>``, with client certificates required
(mTLS), used between the brokers too (``inter.broker.listener.name=SSL``). ``--set`` settings
win over these.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from strom.cli.errors import CliError

CLIENT_DN = "CN=strom-admin,O=strom"


def make_files(folder: Path, host: str) -> dict[str, str]:
    """Writes the files (module doc); their paths by role."""
    if importlib.util.find_spec("cryptography") is None:
        raise CliError("strom cluster up --security needs the 'cryptography' package "
                       "(pip install 'strom[tls]')")
    from strom.testing.tls import CertificateAuthority  # needs cryptography: only --security

    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca = CertificateAuthority(subject="CN=strom local cluster CA,O=strom", valid_days=365)
    hosts = list(dict.fromkeys([host, "localhost", "127.0.0.1"]))
    broker = ca.issue("CN=strom-broker,O=strom", hosts=hosts, valid_days=365)
    client = ca.issue(CLIENT_DN, hosts=(), valid_days=365)
    paths = {"ca": folder / "ca.pem", "broker": folder / "broker.pem",
             "client_cert": folder / "client.crt", "client_key": folder / "client.key",
             "client_properties": folder / "client.properties"}
    ca.write_pem(paths["ca"])
    broker.write_pem(paths["broker"])
    client.write_cert_and_key(paths["client_cert"], paths["client_key"])
    paths["client_properties"].write_text("".join(
        f"{k}={v}\n" for k, v in client_settings({k: str(v) for k, v in paths.items()}).items()))
    return {k: str(v) for k, v in paths.items()}


def client_settings(tls: dict[str, str]) -> dict[str, str]:
    """librdkafka settings of a client of the secured cluster (``-X`` / a profile)."""
    return {"security.protocol": "SSL", "ssl.ca.location": tls["ca"],
            "ssl.certificate.location": tls["client_cert"],
            "ssl.key.location": tls["client_key"]}


def broker_settings(tls: dict[str, str], host: str, port: int) -> dict[str, str]:
    """One broker's listener and TLS settings (Kafka's names)."""
    return {
        "listeners": f"SSL://{host}:{port}",
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": tls["broker"],
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": tls["ca"],
        "ssl.client.auth": "required",
    }
