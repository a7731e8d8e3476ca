"""Password hashes for strom's web logins (the console's users file), with the stdlib's scrypt.

A hash is a PHC-style string: ``$scrypt$ln=<log2 N>,r=<r>,p=<p>$<salt>$<key>`` (salt and key
in unpadded standard base64; 16-byte random salt, 32-byte key; ln=15, r=8, p=1 by default,
about 32 MiB and tens of milliseconds per check: a guess costs an attacker as much).
A users file holds one ``name:hash`` line per user; ``#`` starts a comment line. Passwords
are compared only through their hashes, in constant time; an unknown user costs the same
scrypt work as a known one, so timing does not tell which names exist.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from pathlib import Path

DEFAULT_LN, DEFAULT_R, DEFAULT_P = 15, 8, 1
_HASH = re.compile(r"^\$scrypt\$ln=(\d+),r=(\d+),p=(\d+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$")
_NAME = re.compile(r"^[^\s:#][^\s:]*$")


class PasswordFileError(ValueError):
    """A users file that cannot be used (one line naming the file and the line)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, ln: int, r: int, p: int, size: int) -> bytes:
    n = 1 << ln
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=size,
                          maxmem=128 * r * (n + p + 2) + 1024 * 1024)


def hash_password(password: str, *, ln: int = DEFAULT_LN, r: int = DEFAULT_R,
                  p: int = DEFAULT_P) -> str:
    salt = os.urandom(16)
    return f"$scrypt$ln={ln},r={r},p={p}${_b64(salt)}${_b64(_scrypt(password, salt, ln, r, p, 32))}"


def check_hash(text: str) -> bool:
    m = _HASH.match(text)
    if m is None:
        return False
    return 1 <= int(m.group(1)) <= 20 and int(m.group(2)) >= 1 and int(m.group(3)) >= 1


def verify_password(password: str, hashed: str) -> bool:
    m = _HASH.match(hashed)
    if m is None:
        return False
    ln, r, p = (int(m.group(i)) for i in (1, 2, 3))
    expected = _unb64(m.group(5))
    return hmac.compare_digest(_scrypt(password, _unb64(m.group(4)), ln, r, p, len(expected)),
                               expected)


class PasswordFile:
    """The users of a ``name:hash`` file, read once."""

    def __init__(self, users: dict[str, str], path: Path) -> None:
        self.users = users
        self.path = path
        self._dummy = hash_password(os.urandom(8).hex())  # for unknown names (module doc)

    @classmethod
    def load(cls, path: Path) -> PasswordFile:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise PasswordFileError(f"users file {path}: {exc.strerror or exc}") from None
        users = parse_users(text, str(path))
        if not users:
            raise PasswordFileError(f"users file {path} has no users (add one with "
                                    f"strom console --add-user NAME --users-file {path})")
        return cls(users, Path(path))

    def authenticate(self, name: str, password: str) -> bool:
        hashed = self.users.get(name)
        ok = verify_password(password, hashed or self._dummy)
        return ok and hashed is not None


def parse_users(text: str, where: str) -> dict[str, str]:
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, hashed = line.partition(":")
        if not sep or not _NAME.match(name) or not check_hash(hashed):
            raise PasswordFileError(f"{where} line {number}: expected NAME:$scrypt$ln=..,r=..,"
                                    f"p=..$SALT$HASH")
        users[name] = hashed
    return users


def set_user(path: Path, name: str, password: str) -> bool:
    """Adds ``name`` to the users file (created mode 0600) or replaces its hash; True if new."""
    if not _NAME.match(name):
        raise PasswordFileError(f"invalid user name {name!r}: no spaces or ':'")
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    parse_users("\n".join(lines), str(path))  # refuse to rewrite a file we cannot read
    entry = f"{name}:{hash_password(password)}"
    new = True
    for i, line in enumerate(lines):
        if line.strip().partition(":")[0] == name and not line.strip().startswith("#"):
            lines[i] = entry
            new = False
    if new:
        lines.append(entry)
    fd = os.open(path.with_name(path.name + ".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(path.with_name(path.name + ".tmp"), path)
    return new
