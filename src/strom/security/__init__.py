"""Who is asking, and may they: strom's security, apart from the network and the handlers.

- listeners and TLS: named listeners (``NAME://host:port``), Kafka's security protocol map,
  SSL contexts from PEM or PKCS12 key and trust stores, principals from client certificates;
- SASL: the mechanisms (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) as sans-IO servers a
  connection feeds tokens to, and the SCRAM credentials they check against;
- authorization: Kafka's ACL model and the authorizer every handler asks;
- quotas: client quota entities and the throttle they compute.

A principal is Kafka's ``"<type>:<name>"`` string (``User:ANONYMOUS`` for a connection that
did not authenticate). This package sits beside storage: it may use ``strom.metadata`` (where
credentials and ACLs are kept) and ``strom.protocol``, never the broker, so the broker, the
CLI, Connect and the console can all use it.
"""
