"""The console's users file: scrypt hashes, parsing, and rewriting."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.security.passwords import (
    PasswordFile,
    PasswordFileError,
    hash_password,
    parse_users,
    set_user,
    verify_password,
)


def test_hash_and_verify() -> None:
    h = hash_password("correct horse", ln=10)
    assert h.startswith("$scrypt$ln=10,r=8,p=1$")
    assert verify_password("correct horse", h)
    assert not verify_password("correct horsf", h)
    assert hash_password("x", ln=10) != hash_password("x", ln=10)  # salted
    assert not verify_password("x", "$scrypt$garbage")


def test_users_file(tmp_path: Path) -> None:
    path = tmp_path / "users"
    assert set_user(path, "alice", "one") is True
    assert set_user(path, "bob", "two") is True
    assert set_user(path, "alice", "three") is False  # replaced, not added
    users = PasswordFile.load(path)
    assert sorted(users.users) == ["alice", "bob"]
    assert users.authenticate("alice", "three") and not users.authenticate("alice", "one")
    assert not users.authenticate("carol", "three")
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(PasswordFileError, match="invalid user name"):
        set_user(path, "a b", "x")


@pytest.mark.parametrize("text", ["alice", "alice:plain", "a b:$scrypt$ln=1,r=1,p=1$YQ$YQ",
                                  "alice:$scrypt$ln=99,r=8,p=1$YQ$YQ"])
def test_bad_lines_are_refused(text: str) -> None:
    with pytest.raises(PasswordFileError, match="line 2"):
        parse_users("# comment\n" + text + "\n", "users")


def test_empty_or_missing_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("# nobody\n")
    with pytest.raises(PasswordFileError, match="has no users"):
        PasswordFile.load(tmp_path / "empty")
    with pytest.raises(PasswordFileError, match="No such file"):
        PasswordFile.load(tmp_path / "missing")
