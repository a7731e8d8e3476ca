"""strom.broker.password_encoder: Kafka's PasswordEncoder format for dynamic password configs
(round trips, parameters recorded with the value, a wrong secret or a damaged value refused,
values Java's JCE wrote the way Kafka's EncryptingPasswordEncoder does decoded)."""

from __future__ import annotations

import base64

import pytest

from strom.broker import password_encoder as pe
from strom.config import ConfigError

# Written by javax.crypto on OpenJDK 17 exactly as Kafka's EncryptingPasswordEncoder calls it
# (PBEKeySpec of the secret's chars, SecretKeyFactory, Cipher.getInstance(cipherAlgorithm),
# the parameters' IV), secret "kafka-secret": what a Kafka broker stores in ZooKeeper.
JAVA_CBC = (
    "keyFactoryAlgorithm:PBKDF2WithHmacSHA512,cipherAlgorithm:AES/CBC/PKCS5Padding,keyLength:"
    "128,salt:zwFplAgW0LDTaNAHcfRbnOdxz7mu6AgCqdw5mOXs+YhZcxDnDWpHjlXnH3Ww0v/JoIz+ZrHXbBfRU8U"
    "NKHTz5DekPEPn287CFWWiS7TogFoNn5WvxCGegOZHZmHTVmjfECW62JbC81H7ePCzrKND1+yj2H6Ka29j4lV1sr5"
    "OgFwO8zjgFuakzDbDXO9111tWC3ZH/Z8av0nDWRwnSdW8/YZx8s2RpGLibLxlF5EWxS5ERXTRHM+U+0kvcQdix0Q"
    "vEGdNLvYe2/3wtV1Tm95YGDR9vrmjlOFGPhNOC32vZMFuCkM5pG8u5hbWnJi4GAnTWIaOFWEADSX3G5MN3qHloQ="
    "=,iterations:4096,encryptedPassword:e0hSbpwEZUNtOTijqtyQG/nLNj9ItM3XlzMDH8BlNKs=,passwor"
    "dLength:15,initializationVector:CJ1OGAjkeqV1dc/+EnNP1A=="
)  # PBKDF2WithHmacSHA512, AES/CBC/PKCS5Padding, 128 bits, 4096 iterations
JAVA_GCM = (
    "keyFactoryAlgorithm:PBKDF2WithHmacSHA1,cipherAlgorithm:AES/GCM/NoPadding,keyLength:256,s"
    "alt:EUL3I3qRS0cQsbN796XxjD52vm0WuN8jWt/HBrAnknmq8e1GmisXRTcSeQkyRHVzTC9CrCAjfoBXiB2r5SQs"
    "/Sf+nQUX+A/qPuG7cCLnjvNMEyD1QWP+ZrkUWGbp8tD5/anpAx2OA+893IKxhvpxyKAbiVUIMwzJ9o9vU6TR18zq"
    "CBgXIPGa21lP3ETKD+HmCvdV6t7OeQ58Yzc6/r179o5fjazqdvwwBeDJg0fum4/V7KZthr1hCt3vFWXipeD0TcUR"
    "buHQufvnFodNSMnmOGSbhZBCXcUyaPz45iDQ24OEUYT63sCVfu4W/iCEsgBwnCde/qskZusEue3ZOgyNKQ==,ite"
    "rations:1024,encryptedPassword:dUSYovxMNTHpsYAi7+KxY8qPgmGWTOvs5gJoHGc=,passwordLength:1"
    "3,initializationVector:CmvQScVDx1djizDX,authenticationTagLength:128"
)  # PBKDF2WithHmacSHA1, AES/GCM/NoPadding, 256 bits, 1024 iterations


def fields(encoded: str) -> dict[str, str]:
    return dict(item.split(":", 1) for item in encoded.split(","))


@pytest.mark.parametrize("password", ["s3cret", "", "kéystore-pässwörd🙂", "a,b:c=" * 40])
@pytest.mark.parametrize("cipher", [pe.DEFAULT_CIPHER, pe.GCM])
def test_round_trip_never_shows_the_password(password: str, cipher: str) -> None:
    encoder = pe.PasswordEncoder("the-secret", cipher=cipher)
    encoded = encoder.encode(password)
    assert encoder.decode(encoded) == password
    assert pe.looks_encoded(encoded)
    if password:
        assert password not in encoded
        assert password.encode() not in base64.b64decode(fields(encoded)["encryptedPassword"])
    # a fresh salt and IV each time: the same password never encodes the same
    again = encoder.encode(password)
    assert again != encoded and fields(again)["salt"] != fields(encoded)["salt"]
    assert fields(again)["initializationVector"] != fields(encoded)["initializationVector"]


def test_parameters_are_recorded_and_used_to_decode() -> None:
    writer = pe.PasswordEncoder("the-secret", key_factory="PBKDF2WithHmacSHA256",
                                cipher=pe.GCM, key_length=256, iterations=2048)  # fmt: skip
    encoded = writer.encode("pässword🙂")
    f = fields(encoded)
    assert (f["keyFactoryAlgorithm"], f["cipherAlgorithm"], f["keyLength"], f["iterations"]) == (
        "PBKDF2WithHmacSHA256", "AES/GCM/NoPadding", "256", "2048")
    assert f["passwordLength"] == "10"  # UTF-16 code units, as Java's String.length(): 🙂 is 2
    assert f["authenticationTagLength"] == "128"
    assert len(base64.b64decode(f["salt"])) == 256
    assert len(base64.b64decode(f["initializationVector"])) == 12
    # a broker configured with other parameters (the defaults) still decodes it
    assert pe.PasswordEncoder("the-secret").decode(encoded) == "pässword🙂"
    cbc = fields(pe.PasswordEncoder("the-secret").encode("x"))
    assert (cbc["keyFactoryAlgorithm"], cbc["cipherAlgorithm"], cbc["keyLength"],
            cbc["iterations"]) == ("PBKDF2WithHmacSHA512", "AES/CBC/PKCS5Padding", "128", "4096")
    assert len(base64.b64decode(cbc["initializationVector"])) == 16
    assert "authenticationTagLength" not in cbc


@pytest.mark.parametrize("cipher", [pe.DEFAULT_CIPHER, pe.GCM])
def test_wrong_secret_is_refused(cipher: str) -> None:
    encoded = pe.PasswordEncoder("right", cipher=cipher).encode("the-password")
    for secret in ("wrong", "righ", "right "):
        with pytest.raises(pe.PasswordDecodeError) as info:
            pe.PasswordEncoder(secret).decode(encoded)
        assert "the-password" not in str(info.value)


def test_damaged_values_are_refused() -> None:
    encoder = pe.PasswordEncoder("s")
    good = fields(encoder.encode("the-password"))
    damaged = [
        {**good, "encryptedPassword": base64.b64encode(b"0" * 16).decode()},
        {**good, "passwordLength": "11"},
        {**good, "salt": "not base64!"},
        {**good, "keyLength": "big"},
        {**good, "cipherAlgorithm": "DES/CBC/PKCS5Padding"},
        {**good, "keyFactoryAlgorithm": "PBEWithMD5AndDES"},
    ]
    for value in damaged:
        with pytest.raises(pe.PasswordDecodeError):
            encoder.decode(",".join(f"{k}:{v}" for k, v in value.items()))
    for plain in ("the-password", "a:b,c:d", ""):
        assert not pe.looks_encoded(plain)
        with pytest.raises(pe.PasswordDecodeError):
            encoder.decode(plain)


def test_values_javas_jce_wrote_decode() -> None:
    encoder = pe.PasswordEncoder("kafka-secret")
    assert encoder.decode(JAVA_CBC) == "jäva-pässword🙂"
    assert encoder.decode(JAVA_GCM) == "gcm-from-java"
    with pytest.raises(pe.PasswordDecodeError):
        pe.PasswordEncoder("other-secret").decode(JAVA_CBC)


def test_config() -> None:
    assert pe.encoders_from_config({}) == (None, None)
    assert pe.encoders_from_config({pe.SECRET: ""}) == (None, None)
    new, old = pe.encoders_from_config({pe.SECRET: "new-42", pe.OLD_SECRET: "old-17",
                                        pe.KEY_LENGTH: "256",
                                        pe.ITERATIONS: "8192", pe.CIPHER: pe.GCM})  # fmt: skip
    assert new is not None and old is not None
    assert (new.secret, old.secret, new.key_length, new.iterations, new.cipher) == (
        "new-42", "old-17", 256, 8192, pe.GCM)
    assert "new-42" not in repr(new) and "old-17" not in repr(old)  # logs never show a secret
    bad = [
        ({pe.OLD_SECRET: "o"}, "password.encoder.old.secret is set without"),
        ({pe.SECRET: "s", pe.KEY_LENGTH: "100"}, "password.encoder.key.length=100"),
        ({pe.SECRET: "s", pe.KEY_LENGTH: "x"}, "password.encoder.key.length='x' is not an"),
        ({pe.SECRET: "s", pe.ITERATIONS: "1000"}, "password.encoder.iterations=1000 must be"),
        ({pe.SECRET: "s", pe.CIPHER: "AES/ECB/PKCS5Padding"}, "password.encoder.cipher.algo"),
        ({pe.SECRET: "s", pe.KEY_FACTORY: "PBEWithMD5AndDES"}, "password.encoder.keyfactory"),
    ]
    for values, message in bad:
        with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
            pe.encoders_from_config(values)
