"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's broker serves them.

The exchange itself is ``scramp``'s (nonces, the proof check in constant time, the server
signature); this module puts Kafka's rules around it (``ScramSaslServer``):

- the client-first message must have gs2 flag ``n`` (no channel binding: ``y`` and ``p`` are
  refused, as Kafka's message pattern does), and an authorization id, if any, must be the
  user's name;
- the user name is the ``n=`` attribute with ``=2C`` / ``=3D`` unescaped and **no SASLprep**:
  Kafka normalises neither names nor passwords (``ScramFormatter.normalize`` is plain UTF-8),
  and neither do its clients (librdkafka, the Java client, kafka-python), so a credential made
  here with a password SASLprep would change (NFKC forms, non-ASCII spaces, soft hyphens)
  still matches what those clients compute. The credential is looked up by the name as sent;
  ``scramp`` SASLpreps its own copy only to refuse what SASLprep prohibits (control
  characters in a name: Kafka accepts those, strom refuses them);
- an unknown user fails at the first message; a credential with fewer iterations than the
  mechanism's minimum (4096) is refused;
- credentials are Kafka's: ``salt``, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))``,
  ``ServerKey = HMAC(SaltedPassword, "Server Key")``, ``iterations``, kept as
  ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` (``ScramCredentialUtils``);
  the password is never stored. AlterUserScramCredentials carries the client's
  ``SaltedPassword = PBKDF2-HMAC(password, salt, iterations)``, from which the keys are made.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.security.sasl.mechanism import AuthenticationFailed

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
#: mechanism name -> (hash name, Kafka's mechanism type byte on the wire (KIP-554))
MECHANISMS: dict[str, tuple[str, int]] = {SCRAM_SHA_256: ("sha256", 1), SCRAM_SHA_512: ("sha512", 2)}
MIN_ITERATIONS = 4096  # both mechanisms (Kafka's ScramMechanism.minIterations)
MAX_ITERATIONS = 16384  # what AlterUserScramCredentials accepts (Kafka's maxIterations)
DEFAULT_ITERATIONS = 4096


def mechanism_of_type(type_byte: int) -> str | None:
    """The SCRAM mechanism of a KIP-554 type byte (1, 2), None for an unknown one (0 …)."""
    for name, (_hash, code) in MECHANISMS.items():
        if code == type_byte:
            return name
    return None


class CredentialError(ValueError):
    """A stored credential string that does not parse."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_string(self) -> str:
        """Kafka's persisted form (``ScramCredentialUtils.credentialToString``)."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")  # fmt: skip

    @classmethod
    def from_string(cls, text: str) -> ScramCredential:
        props: dict[str, str] = {}
        for token in text.split(","):
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise CredentialError(f"credential not valid: {token!r}")
            props[key] = value
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise CredentialError(f"credential not valid: keys {sorted(props)}")
        try:
            return cls(base64.b64decode(props["salt"], validate=True),
                       base64.b64decode(props["stored_key"], validate=True),
                       base64.b64decode(props["server_key"], validate=True),
                       int(props["iterations"]))  # fmt: skip
        except (binascii.Error, ValueError) as exc:
            raise CredentialError(f"credential not valid: {exc}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, i)``: PBKDF2-HMAC of the UTF-8 password, no SASLprep (Kafka's)."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode("utf-8"), salt,
                               iterations)  # fmt: skip


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes,
                           iterations: int) -> ScramCredential:  # fmt: skip
    """The stored credential of a salted password (Kafka's ``generateCredential``)."""
    hash_name = MECHANISMS[mechanism][0]
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", hash_name)
    return ScramCredential(salt, stored_key, server_key, iterations)


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:  # fmt: skip
    """A new credential for ``password`` (a random 32-byte salt unless given)."""
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted(mechanism, salt,
                                  salted_password(mechanism, password, salt, iterations),
                                  iterations)  # fmt: skip


def server_nonce() -> str:
    """Kafka's server nonce: 130 random bits in base 36 (``ScramFormatter.secureRandomString``).

    Not scramp's default (64 hex digits): librdkafka 2.0 (Debian's kcat) then sends back a
    client-final message whose nonce does not match, and fails every SCRAM login."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    value = secrets.randbits(130)
    out = []
    while value:
        value, digit = divmod(value, 36)
        out.append(digits[digit])
    return "".join(reversed(out)) or "0"


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


#: user name -> its credential for this mechanism, None if it has none
CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._server: Any = None  # scramp's ScramServer once the first message came
        self._user: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self._done

    @property
    def authorization_id(self) -> str:
        if not self._done or self._user is None:
            raise RuntimeError("the SCRAM exchange has not completed")
        return self._user

    @property
    def credential_expiry_ms(self) -> int | None:
        return None

    @property
    def refusal(self) -> str | None:
        return None

    def evaluate(self, token: bytes) -> bytes:
        if self._done:
            raise AuthenticationFailed(f"{self.mechanism}: a token after the exchange completed")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"{self.mechanism}: a message that is not UTF-8") from None
        if self._server is None:
            return self._first(text)
        return self._final(text)

    def _first(self, text: str) -> bytes:
        # gs2-header: "n," [ "a=" authzid ] "," ; Kafka refuses "y" and "p" (channel binding)
        if not text.startswith("n,"):
            raise AuthenticationFailed(
                f"Invalid SCRAM client first message format: gs2 flag of {text[:8]!r}")
        end = text.find(",", 2)
        if end < 0:
            raise AuthenticationFailed("Invalid SCRAM client first message format")
        authzid = text[2:end]
        if authzid and not authzid.startswith("a="):
            raise AuthenticationFailed("Invalid SCRAM client first message format: authzid")
        bare = text[end + 1:]
        name = next((attr[2:] for attr in bare.split(",") if attr.startswith("n=")), None)
        if not name:
            raise AuthenticationFailed("Invalid SCRAM client first message format: no user")
        user = _unescape(name)
        credential = self._lookup(user)
        if credential is None:
            raise AuthenticationFailed(
                f"Authentication failed: Invalid user credentials (unknown user {user!r})")
        if authzid and _unescape(authzid[2:]) != user:
            message = ("Authentication failed: Client requested an authorization id that is "
                       "different from username")  # fmt: skip
            raise AuthenticationFailed(message, message)
        if credential.iterations < MIN_ITERATIONS:
            raise AuthenticationFailed(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism}")
        import scramp  # the security extra: only a SCRAM exchange needs it

        found = (credential.salt, credential.stored_key, credential.server_key,
                 credential.iterations)  # fmt: skip
        self._server = scramp.ScramMechanism(self.mechanism).make_server(
            lambda _name: found, s_nonce=server_nonce())
        try:
            self._server.set_client_first(text)
            first: str = self._server.get_server_first()
        except scramp.ScramException as exc:
            raise AuthenticationFailed(f"{self.mechanism} client first message: {exc}") from None
        self._user = user
        return first.encode()

    def _final(self, text: str) -> bytes:
        import scramp

        assert self._server is not None
        nonce = next((attr[2:] for attr in text.split(",") if attr.startswith("r=")), "")
        server_nonce = str(self._server.nonce)
        if nonce != server_nonce and nonce.endswith(server_nonce):
            return self._final_legacy_nonce(text)
        try:
            self._server.set_client_final(text)
            final: str = self._server.get_server_final()
        except scramp.ScramException as exc:
            raise AuthenticationFailed(
                f"Invalid client credentials of user {self._user!r}: {exc}") from None
        self._done = True
        return final.encode()

    def _final_legacy_nonce(self, text: str) -> bytes:
        """A client-final message whose nonce is the server's with something before it.

        librdkafka before 2.2 (Debian's kcat: 2.0) sends its own nonce again in front of the
        combined one; Kafka accepts that (``ScramSaslServer`` checks the final nonce *ends
        with* the server's, not that it equals it), so strom does too. scramp insists on
        equality, so this one step is RFC 5802's proof check done here with scramp's
        primitives: the proof still covers the message as the client sent it, and the
        server's fresh nonce must be in it."""
        from scramp import utils

        assert self._server is not None
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        attrs = dict(a.split("=", 1) for a in without_proof.split(",") if "=" in a)
        gs2 = str(self._server.gs2_header)
        try:
            channel = base64.b64decode(attrs.get("c", ""), validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailed("Invalid SCRAM client final message format") from None
        if not sep or channel != gs2.encode():
            raise AuthenticationFailed("Invalid SCRAM client final message: channel binding")
        hf = getattr(hashlib, MECHANISMS[self.mechanism][0])
        auth_msg = ",".join((self._server.client_first_bare, self._server.server_first,
                             without_proof)).encode()  # fmt: skip
        stored_key, server_key = self._server.stored_key, self._server.server_key
        try:
            client_key = utils.xor(utils.hmac(hf, stored_key, auth_msg), proof)
        except ValueError:
            raise AuthenticationFailed(
                f"Invalid client credentials of user {self._user!r}: proof length") from None
        if not hmac.compare_digest(utils.h(hf, client_key), stored_key):
            raise AuthenticationFailed(f"Invalid client credentials of user {self._user!r}")
        self._done = True
        signature = utils.hmac(hf, server_key, auth_msg)
        return b"v=" + base64.b64encode(signature)
