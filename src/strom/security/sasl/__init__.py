"""SASL authentication, sans-IO: the mechanism servers (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER), a listener's settings from Kafka's property names, and the per-connection
authenticator that enforces Kafka's order of SaslHandshake / SaslAuthenticate and sessions.

The broker's connection feeds tokens in and writes what comes out; nothing here does I/O.
"""

from strom.security.sasl.authenticator import AuthenticateResult, Authenticator
from strom.security.sasl.config import SUPPORTED, SaslConfigError, SaslSettings
from strom.security.sasl.mechanism import AuthenticationFailed, MechanismServer

__all__ = ["SUPPORTED", "AuthenticateResult", "AuthenticationFailed", "Authenticator",
           "MechanismServer", "SaslConfigError", "SaslSettings"]  # fmt: skip
