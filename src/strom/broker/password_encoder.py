"""Dynamic password configs encrypted at rest: Kafka's ``PasswordEncoder`` (KIP-226).

A password-type dynamic broker config (``listener.name.<l>.ssl.keystore.password`` ...) is
stored in the metadata store encrypted with a key derived from the static broker config
``password.encoder.secret``; :mod:`strom.broker.dynamic_config` encodes before it writes and
decodes after it reads.

Stored format (Kafka's, so a Kafka broker sharing the ZooKeeper with the same secret decodes
strom's values and strom decodes Kafka's): ``key:value`` pairs joined by ``,`` in no
particular order, every binary value standard base64 with padding::

    keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,
    keyLength:128,iterations:4096,salt:<256 random bytes>,initializationVector:<16 bytes>,
    passwordLength:<len>,encryptedPassword:<ciphertext>

(one line; ``AES/GCM/NoPadding`` adds ``authenticationTagLength:128``, its IV is 12 bytes and
its ciphertext ends with the 16-byte tag). The key is PBKDF2 (``keyFactoryAlgorithm``'s HMAC
hash) of the secret's UTF-8 bytes over ``salt`` for ``iterations`` rounds, ``keyLength`` bits;
the plaintext is the password's UTF-8 bytes, PKCS#7-padded for CBC. ``passwordLength`` is the
password's length in UTF-16 code units (Java's ``String.length()``), checked after decryption.
Every parameter travels with the value, so ``password.encoder.*`` may change later: a value
decodes with whatever parameters it was written with, given the secret.

Static configs (Kafka's names and defaults): ``password.encoder.secret`` (unset: no encoder,
and a password config cannot be stored), ``password.encoder.old.secret`` (rotation, see
:mod:`strom.broker.dynamic_config`), ``password.encoder.keyfactory.algorithm`` (unset:
PBKDF2WithHmacSHA512), ``password.encoder.cipher.algorithm`` (AES/CBC/PKCS5Padding; strom
also knows AES/GCM/NoPadding), ``password.encoder.key.length`` (128; AES takes 128, 192 or
256), ``password.encoder.iterations`` (4096, at least 1024).

The ``cryptography`` package does the work (the ``tls`` and ``security`` extras install it);
without it, a configured secret is one readable :class:`~strom.config.ConfigError` at start-up.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strom.config import ConfigError

SECRET = "password.encoder.secret"
OLD_SECRET = "password.encoder.old.secret"
KEY_FACTORY = "password.encoder.keyfactory.algorithm"
CIPHER = "password.encoder.cipher.algorithm"
KEY_LENGTH = "password.encoder.key.length"
ITERATIONS = "password.encoder.iterations"

DEFAULT_KEY_FACTORY = "PBKDF2WithHmacSHA512"
DEFAULT_CIPHER = "AES/CBC/PKCS5Padding"
GCM = "AES/GCM/NoPadding"
DEFAULT_KEY_LENGTH = 128
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 1024  # Kafka's atLeast(1024)
SALT_BYTES = 256
GCM_TAG_BITS = 128

# Java's SecretKeyFactory names -> the HMAC hash of PBKDF2
_HASHES = {
    "PBKDF2WithHmacSHA1": "SHA1",
    "PBKDF2WithHmacSHA224": "SHA224",
    "PBKDF2WithHmacSHA256": "SHA256",
    "PBKDF2WithHmacSHA384": "SHA384",
    "PBKDF2WithHmacSHA512": "SHA512",
}
_CIPHERS = (DEFAULT_CIPHER, GCM)
_AES_KEY_BITS = (128, 192, 256)
# the fields every encoded value has (besides the cipher's own)
_FIELDS = ("cipherAlgorithm", "keyLength", "salt", "iterations", "encryptedPassword",
           "passwordLength", "initializationVector")  # fmt: skip


class PasswordDecodeError(Exception):
    """An encoded value that this secret cannot decode (wrong secret, damaged value,
    parameters strom does not support); the message never holds the password."""


def looks_encoded(value: str) -> bool:
    """Whether ``value`` has the stored format's fields (else it is a plain-text value an
    older strom stored)."""
    fields = _parse(value)
    return fields is not None and all(f in fields for f in _FIELDS)


def _parse(value: str) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition(":")
        if not sep:
            return None
        out[key.strip()] = val.strip()
    return out


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import hashes, padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
    except ImportError:
        raise ConfigError(f"{SECRET} needs the 'cryptography' package "
                          "(pip install 'strom[tls]')") from None  # fmt: skip
    return hashes, padding, Cipher, algorithms, modes, PBKDF2HMAC


def _utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True, repr=False)  # repr: never print the secret
class PasswordEncoder:
    """Encodes with one secret and the configured parameters; decodes a value with the
    parameters recorded in it."""

    secret: str
    key_factory: str = DEFAULT_KEY_FACTORY
    cipher: str = DEFAULT_CIPHER
    key_length: int = DEFAULT_KEY_LENGTH
    iterations: int = DEFAULT_ITERATIONS

    def __post_init__(self) -> None:
        _check_parameters(self.key_factory, self.cipher, self.key_length)
        if self.iterations < MIN_ITERATIONS:
            raise ConfigError(f"{ITERATIONS}={self.iterations} must be at least {MIN_ITERATIONS}")
        _crypto()

    def __repr__(self) -> str:
        return (f"PasswordEncoder({self.key_factory}, {self.cipher}, {self.key_length} bits, "
                f"{self.iterations} iterations)")  # fmt: skip

    def _key(self, key_factory: str, salt: bytes, iterations: int, key_length: int) -> bytes:
        hashes, _padding, _cipher, _algorithms, _modes, pbkdf2 = _crypto()
        kdf = pbkdf2(algorithm=getattr(hashes, _HASHES[key_factory])(), length=key_length // 8,
                     salt=salt, iterations=iterations)  # fmt: skip
        return bytes(kdf.derive(self.secret.encode("utf-8")))

    def encode(self, password: str) -> str:
        """``password`` encrypted with a fresh salt and IV, in the stored format."""
        _hashes, padding, cipher_cls, algorithms, modes, _kdf = _crypto()
        salt = os.urandom(SALT_BYTES)
        key = self._key(self.key_factory, salt, self.iterations, self.key_length)
        plain = password.encode("utf-8")
        fields = {
            "keyFactoryAlgorithm": self.key_factory,
            "cipherAlgorithm": self.cipher,
            "keyLength": str(self.key_length),
            "salt": _b64(salt),
            "iterations": str(self.iterations),
            "passwordLength": str(_utf16_length(password)),
        }
        if self.cipher == GCM:
            iv = os.urandom(12)
            enc = cipher_cls(algorithms.AES(key), modes.GCM(iv)).encryptor()
            data = enc.update(plain) + enc.finalize() + enc.tag
            fields["authenticationTagLength"] = str(GCM_TAG_BITS)
        else:
            iv = os.urandom(16)
            padder = padding.PKCS7(128).padder()
            enc = cipher_cls(algorithms.AES(key), modes.CBC(iv)).encryptor()
            data = enc.update(padder.update(plain) + padder.finalize()) + enc.finalize()
        fields["initializationVector"] = _b64(iv)
        fields["encryptedPassword"] = _b64(data)
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        """The password in ``encoded``; :class:`PasswordDecodeError` unless this secret
        decrypts it to a password of the recorded length."""
        fields = _parse(encoded)
        if fields is None or not all(f in fields for f in _FIELDS):
            raise PasswordDecodeError("not an encoded password")
        try:
            key_factory = fields.get("keyFactoryAlgorithm", DEFAULT_KEY_FACTORY)
            cipher = fields["cipherAlgorithm"]
            key_length, iterations = int(fields["keyLength"]), int(fields["iterations"])
            length = int(fields["passwordLength"])
            salt = base64.b64decode(fields["salt"], validate=True)
            iv = base64.b64decode(fields["initializationVector"], validate=True)
            data = base64.b64decode(fields["encryptedPassword"], validate=True)
            tag_bits = int(fields.get("authenticationTagLength", GCM_TAG_BITS))
        except (ValueError, binascii.Error) as exc:
            raise PasswordDecodeError(f"damaged encoded password ({exc})") from None
        try:
            _check_parameters(key_factory, cipher, key_length)
        except ConfigError as exc:
            raise PasswordDecodeError(str(exc)) from None
        if iterations < 1:
            raise PasswordDecodeError(f"iterations {iterations} in the encoded password")
        _hashes, padding, cipher_cls, algorithms, modes, _kdf = _crypto()
        key = self._key(key_factory, salt, iterations, key_length)
        try:
            if cipher == GCM:
                if tag_bits != GCM_TAG_BITS or len(data) < 16:
                    raise ValueError(f"GCM tag of {tag_bits} bits")
                dec = cipher_cls(algorithms.AES(key), modes.GCM(iv, data[-16:])).decryptor()
                plain = dec.update(data[:-16]) + dec.finalize()
            else:
                dec = cipher_cls(algorithms.AES(key), modes.CBC(iv)).decryptor()
                unpadder = padding.PKCS7(128).unpadder()
                plain = unpadder.update(dec.update(data) + dec.finalize()) + unpadder.finalize()
            password = plain.decode("utf-8")
        except Exception:  # InvalidTag, bad padding, bad IV size, not UTF-8: all one answer
            raise PasswordDecodeError("Password could not be decoded") from None
        if _utf16_length(password) != length:  # CBC with a wrong key can unpad cleanly
            raise PasswordDecodeError(
                "Password could not be decoded, sanity check of length failed")
        return password


def _check_parameters(key_factory: str, cipher: str, key_length: int) -> None:
    if key_factory not in _HASHES:
        raise ConfigError(f"{KEY_FACTORY}={key_factory!r} is not supported "
                          f"(one of {', '.join(_HASHES)})")  # fmt: skip
    if cipher not in _CIPHERS:
        raise ConfigError(f"{CIPHER}={cipher!r} is not supported (one of {', '.join(_CIPHERS)})")
    if key_length not in _AES_KEY_BITS:
        raise ConfigError(f"{KEY_LENGTH}={key_length} is not an AES key length (128, 192, 256)")


def from_config(values: Mapping[str, str | None], secret_key: str = SECRET) -> PasswordEncoder | None:
    """The encoder for the secret in ``secret_key`` (``password.encoder.secret`` or
    ``.old.secret``) with the configured parameters; None when the secret is unset or empty.
    A bad parameter, or no ``cryptography``, is a :class:`~strom.config.ConfigError`."""
    secret = values.get(secret_key)
    if not secret:
        return None

    def number(key: str, default: int) -> int:
        raw = values.get(key)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{key}={raw!r} is not an integer") from None

    return PasswordEncoder(
        secret,
        key_factory=values.get(KEY_FACTORY) or DEFAULT_KEY_FACTORY,
        cipher=values.get(CIPHER) or DEFAULT_CIPHER,
        key_length=number(KEY_LENGTH, DEFAULT_KEY_LENGTH),
        iterations=number(ITERATIONS, DEFAULT_ITERATIONS),
    )


def encoders_from_config(
    values: Mapping[str, str | None],
) -> tuple[PasswordEncoder | None, PasswordEncoder | None]:
    """The encoders of ``password.encoder.secret`` and ``.old.secret`` (each None when unset);
    an old secret without a new one is a :class:`~strom.config.ConfigError`, as a Kafka broker
    fails to start with one."""
    encoder, old = from_config(values, SECRET), from_config(values, OLD_SECRET)
    if old is not None and encoder is None:
        raise ConfigError(f"{OLD_SECRET} is set without {SECRET} (the secret the passwords "
                          "are re-encoded with)")  # fmt: skip
    return encoder, old
