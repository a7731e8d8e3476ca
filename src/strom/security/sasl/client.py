"""The client side of SASL, for a broker's own connections to its peers (inter-broker SASL).

Kafka's broker authenticates to the inter-broker listener with
``sasl.mechanism.inter.broker.protocol`` and the ``username`` / ``password`` options of that
listener's JAAS entry for the mechanism (``listener.name.<l>.<mechanism>.sasl.jaas.config``,
``PlainLoginModule`` or ``ScramLoginModule``). :func:`credentials` reads them;
:class:`SaslClient` is the sans-IO exchange (PLAIN: one token; SCRAM: scramp's client), fed the
server's challenges. scramp's client SASLpreps the password, which Kafka's clients do not: a
broker password that SASLprep changes (a no-break space, a ligature) cannot log in by SCRAM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strom.security.sasl import jaas
from strom.security.sasl.config import PLAIN, SaslConfigError
from strom.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS


@dataclass(frozen=True)
class ClientCredentials:
    mechanism: str
    username: str
    password: str = ""

    def __repr__(self) -> str:  # never the password in a log line
        return f"ClientCredentials({self.mechanism}, {self.username!r})"


def credentials(values: Mapping[str, str], listener: str, mechanism: str) -> ClientCredentials:
    """The broker's own credentials on ``listener`` for ``mechanism`` (SaslConfigError naming
    the property when they are missing)."""
    mechanism = mechanism.upper()
    if mechanism != PLAIN and mechanism not in SCRAM_MECHANISMS:
        raise SaslConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism}: strom's "
                              "brokers authenticate to each other with PLAIN or SCRAM")  # fmt: skip
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = values.get(key) or values.get("sasl.jaas.config")
    if not text:
        raise SaslConfigError(f"{key}: the inter-broker listener needs the broker's own "
                              "username and password")  # fmt: skip
    try:
        entries = jaas.parse(text)
    except jaas.JaasError as exc:
        raise SaslConfigError(f"{key}: {exc}") from None
    for entry in entries:
        if "username" in entry.options:
            return ClientCredentials(mechanism, entry.options["username"],
                                     entry.options.get("password", ""))  # fmt: skip
    raise SaslConfigError(f"{key}: no username=\"...\" password=\"...\" for the broker itself")


class SaslClient:
    """One client exchange: :meth:`first`, then :meth:`step` per server challenge until
    :attr:`done`; raises ValueError when the server's answers do not check out."""

    def __init__(self, creds: ClientCredentials) -> None:
        self.creds = creds
        self.done = False
        self._scram: object | None = None

    def first(self) -> bytes:
        if self.creds.mechanism == PLAIN:
            return f"\0{self.creds.username}\0{self.creds.password}".encode()
        import scramp

        client = scramp.ScramClient([self.creds.mechanism], self.creds.username,
                                    self.creds.password)  # fmt: skip
        self._scram = client
        return str(client.get_client_first()).encode()

    def step(self, challenge: bytes) -> bytes | None:
        """The next token answering ``challenge``; None once the exchange is over."""
        if self.creds.mechanism == PLAIN:
            self.done = True
            return None
        import scramp

        client = self._scram
        assert isinstance(client, scramp.ScramClient)
        text = challenge.decode()
        try:
            if text.startswith("v=") or text.startswith("e="):
                client.set_server_final(text)  # checks the server's signature
                self.done = True
                return None
            client.set_server_first(text)
            return str(client.get_client_final()).encode()
        except scramp.ScramException as exc:
            raise ValueError(f"SCRAM exchange with the peer failed: {exc}") from None
