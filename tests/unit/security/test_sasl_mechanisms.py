"""The SASL mechanism servers against real client-side implementations: scramp's SCRAM client
(the RFC's client, as librdkafka computes it), PLAIN tokens as clients send them, unsecured
JWS as librdkafka's ``sasl.oauthbearer.config`` makes them, and JWTs signed with PyJWT."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
import scramp
from cryptography.hazmat.primitives.asymmetric import rsa

from strom.security.sasl import jaas
from strom.security.sasl.mechanism import AuthenticationFailed
from strom.security.sasl.oauthbearer import (
    JwksValidator,
    KeySet,
    OAuthBearerServer,
    TokenInvalid,
    UnsecuredValidator,
)
from strom.security.sasl.plain import PlainServer
from strom.security.sasl.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramServer,
    credential_from_salted,
    make_credential,
    salted_password,
)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="alice \\"quoted\\" pw";')  # fmt: skip


def test_jaas_plain_users_kafka_syntax() -> None:
    assert jaas.plain_users(JAAS) == {"admin": "admin-secret", "alice": 'alice "quoted" pw'}
    options = jaas.module_options(JAAS, jaas.PLAIN_LOGIN_MODULE)
    assert options["username"] == "admin"


@pytest.mark.parametrize("bad", [
    "org.x.Module;",  # no flag
    "org.x.Module required user_a=;",  # no value
    "org.x.Module required user_a=\"x\"",  # no ';'
    "",
])  # fmt: skip
def test_jaas_refuses_malformed(bad: str) -> None:
    with pytest.raises(jaas.JaasError):
        jaas.parse(bad)


def test_plain_accepts_valid_and_authzid_equal() -> None:
    users = jaas.plain_users(JAAS)
    server = PlainServer(users)
    assert server.evaluate(b"\0admin\0admin-secret") == b""
    assert server.complete and server.authorization_id == "admin"
    server = PlainServer(users)
    server.evaluate(b"admin\0admin\0admin-secret")
    assert server.authorization_id == "admin"


@pytest.mark.parametrize("token,client_sees", [
    (b"\0admin\0wrong", "Invalid username or password"),
    (b"\0nobody\0admin-secret", "Invalid username or password"),
    (b"alice\0admin\0admin-secret", "different from username"),
    (b"\0admin", "invalid credentials"),
    (b"\0\0pw", "invalid credentials"),
])  # fmt: skip
def test_plain_refusals(token: bytes, client_sees: str) -> None:
    server = PlainServer(jaas.plain_users(JAAS))
    with pytest.raises(AuthenticationFailed) as info:
        server.evaluate(token)
    assert not server.complete
    assert client_sees in (info.value.client_message or
                           "Authentication failed ... invalid credentials")


def _exchange(mechanism: str, credential: ScramCredential | None, user: str, password: str,
              tamper: bool = False) -> ScramServer:  # fmt: skip
    client = scramp.ScramClient([mechanism], user, password)
    server = ScramServer(mechanism, lambda name: credential if name == user else None)
    first = server.evaluate(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = client.get_client_final()
    if tamper:
        final = final[:-4] + ("AAA=" if not final.endswith("AAA=") else "BBB=")
    server_final = server.evaluate(final.encode())
    client.set_server_final(server_final.decode())  # the client checks the server signature
    return server


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_full_exchange(mechanism: str) -> None:
    credential = make_credential(mechanism, "s3cret", 4096)
    server = _exchange(mechanism, credential, "alice", "s3cret")
    assert server.complete and server.authorization_id == "alice"


def test_scram_wrong_password_unknown_user_and_few_iterations() -> None:
    credential = make_credential(SCRAM_SHA_256, "s3cret", 4096)
    with pytest.raises(AuthenticationFailed):
        _exchange(SCRAM_SHA_256, credential, "alice", "wrong")
    with pytest.raises(AuthenticationFailed):
        _exchange(SCRAM_SHA_256, None, "alice", "s3cret")
    weak = make_credential(SCRAM_SHA_256, "s3cret", 1000)
    with pytest.raises(AuthenticationFailed, match="less than the minimum"):
        _exchange(SCRAM_SHA_256, weak, "alice", "s3cret")


def test_scram_refuses_channel_binding_flag_and_other_authzid() -> None:
    credential = make_credential(SCRAM_SHA_256, "pw", 4096)
    server = ScramServer(SCRAM_SHA_256, lambda name: credential)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"y,,n=alice,r=abcdef")
    server = ScramServer(SCRAM_SHA_256, lambda name: credential)
    with pytest.raises(AuthenticationFailed) as info:
        server.evaluate(b"n,a=bob,n=alice,r=abcdef")
    assert "different from username" in (info.value.client_message or "")


def test_scram_names_are_unescaped_not_saslprepped() -> None:
    """Kafka normalises nothing: a user "a,b=c" is sent as "a=2Cb=3Dc"; a password with a
    non-ASCII space (SASLprep maps it to a space) must hash as the raw UTF-8 it is."""
    password = "pass\u00a0word"  # NO-BREAK SPACE: SASLprep would map it to " "
    credential = make_credential(SCRAM_SHA_256, password, 4096)
    salted = salted_password(SCRAM_SHA_256, password, credential.salt, 4096)
    assert credential_from_salted(SCRAM_SHA_256, credential.salt, salted, 4096) == credential
    seen: list[str] = []
    server = ScramServer(SCRAM_SHA_256, lambda name: seen.append(name) or credential)
    server.evaluate(b"n,,n=a=2Cb=3Dc,r=abcdef")
    assert seen == ["a,b=c"]


def test_credential_string_is_kafkas_format() -> None:
    credential = make_credential(SCRAM_SHA_512, "pw", 8192, salt=b"0123456789abcdef")
    text = credential.to_string()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=")
    assert ",server_key=" in text and text.endswith(",iterations=8192")
    assert ScramCredential.from_string(text) == credential
    with pytest.raises(ValueError):
        ScramCredential.from_string("salt=AA==,iterations=4096")


def _b64(doc: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()


def unsecured(claims: dict) -> str:
    return f"{_b64({'alg': 'none'})}.{_b64(claims)}."


def _first(token: str, authzid: str = "") -> bytes:
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_unsecured_valid_and_expired() -> None:
    now = time.time()
    validator = UnsecuredValidator()
    server = OAuthBearerServer(validator)
    assert server.evaluate(_first(unsecured({"sub": "alice", "exp": now + 60, "iat": now}))) == b""
    assert server.authorization_id == "alice"
    assert abs(server.credential_expiry_ms - (now + 60) * 1000) < 1000

    server = OAuthBearerServer(validator)
    challenge = server.evaluate(_first(unsecured({"sub": "alice", "exp": now - 5})))
    assert json.loads(challenge) == {"status": "invalid_token"}
    assert not server.complete
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"\x01")


def test_oauthbearer_unsecured_options_scope_and_principal_claim() -> None:
    options = jaas.module_options(
        'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
        'unsecuredValidatorPrincipalClaimName="client_id" '
        'unsecuredValidatorRequiredScope="kafka write" '
        'unsecuredValidatorAllowableClockSkewMs="2000";', jaas.OAUTHBEARER_LOGIN_MODULE)
    validator = UnsecuredValidator.from_options(options)
    now = time.time()
    token = unsecured({"client_id": "svc", "exp": now - 1, "scope": "kafka write read"})
    assert validator.validate(token).principal == "svc"  # 1 s late, within 2 s of skew
    with pytest.raises(TokenInvalid) as info:
        validator.validate(unsecured({"client_id": "svc", "exp": now + 9, "scope": "kafka"}))
    assert info.value.status == "insufficient_scope"
    with pytest.raises(TokenInvalid):  # no principal claim
        validator.validate(unsecured({"sub": "svc", "exp": now + 9, "scope": "kafka write"}))
    with pytest.raises(TokenInvalid):  # signed tokens are not unsecured ones
        validator.validate(unsecured({"client_id": "svc", "exp": now + 9})[:-1] + ".c2ln")


def test_oauthbearer_authzid_must_be_the_principal() -> None:
    token = unsecured({"sub": "alice", "exp": time.time() + 60})
    server = OAuthBearerServer(UnsecuredValidator())
    with pytest.raises(AuthenticationFailed):
        server.evaluate(_first(token, authzid="bob"))
    with pytest.raises(AuthenticationFailed):
        OAuthBearerServer(UnsecuredValidator()).evaluate(b"n,,auth=Bearer x")


def test_oauthbearer_jwks_validator() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    public.update(kid="k1", use="sig", alg="RS256")
    keys = KeySet()
    assert keys.update({"keys": [public]}) == 1
    validator = JwksValidator(keys, audience=["kafka"], issuer="https://idp.test")
    now = int(time.time())
    good = jwt.encode({"sub": "svc", "exp": now + 60, "iat": now, "aud": "kafka",
                       "iss": "https://idp.test"}, key, "RS256", headers={"kid": "k1"})  # fmt: skip
    server = OAuthBearerServer(validator)
    assert server.evaluate(_first(good)) == b"" and server.authorization_id == "svc"
    for claims in ({"sub": "svc", "exp": now - 120, "aud": "kafka", "iss": "https://idp.test"},
                   {"sub": "svc", "exp": now + 60, "aud": "other", "iss": "https://idp.test"},
                   {"sub": "svc", "exp": now + 60, "aud": "kafka", "iss": "https://evil"}):
        bad = jwt.encode(claims, key, "RS256", headers={"kid": "k1"})
        with pytest.raises(TokenInvalid):
            validator.validate(bad)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode({"sub": "svc", "exp": now + 60, "aud": "kafka", "iss": "https://idp.test"},
                        other, "RS256", headers={"kid": "k1"})  # fmt: skip
    with pytest.raises(TokenInvalid):
        validator.validate(forged)
    with pytest.raises(TokenInvalid):  # alg none never passes the JWKS validator
        validator.validate(unsecured({"sub": "svc", "exp": now + 60}))


def _legacy_client_final(mechanism: str, password: str, client_first_bare: str,
                         server_first: str, cnonce: str) -> str:  # fmt: skip
    """librdkafka < 2.2's client-final: its own nonce again before the combined one."""
    import hashlib
    import hmac as hm

    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    hash_name = "sha256" if mechanism == SCRAM_SHA_256 else "sha512"
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(attrs["s"]),
                                 int(attrs["i"]))  # fmt: skip
    client_key = hm.digest(salted, b"Client Key", hash_name)
    stored = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c=biws,r={cnonce}{attrs['r']}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hm.digest(stored, auth, hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_accepts_librdkafka_2_0_doubled_nonce_as_kafka_does(mechanism: str) -> None:
    credential = make_credential(mechanism, "pw", 4096)
    cnonce = "XfuJN3fo[jFr?=@xxC}ic]d|@ewp\\Hl]"
    server = ScramServer(mechanism, lambda name: credential)
    first = server.evaluate(f"n,,n=bob,r={cnonce}".encode()).decode()
    final = _legacy_client_final(mechanism, "pw", f"n=bob,r={cnonce}", first, cnonce)
    assert server.evaluate(final.encode()).startswith(b"v=")
    assert server.complete
    server = ScramServer(mechanism, lambda name: credential)
    first = server.evaluate(f"n,,n=bob,r={cnonce}".encode()).decode()
    final = _legacy_client_final(mechanism, "wrong", f"n=bob,r={cnonce}", first, cnonce)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(final.encode())
    server = ScramServer(mechanism, lambda name: credential)  # a nonce not ending in ours
    server.evaluate(f"n,,n=bob,r={cnonce}".encode())
    with pytest.raises(AuthenticationFailed):
        server.evaluate(f"c=biws,r={cnonce}zzz,p=AAAA".encode())


def test_sasl_keys_are_known_broker_properties() -> None:
    from strom.config import known_keys, unknown_keys
    from strom.security.sasl.config import KNOWN_KEYS

    assert not KNOWN_KEYS - known_keys()
    assert unknown_keys({"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "x",
                         "listener.name.a.connections.max.reauth.ms": "1",
                         "connections.max.reauth.ms": "1"}) == []  # fmt: skip
