"""The client-side admin layer: typed functions over confluent-kafka and strom's codec.

What the tools on top of a cluster (the ``strom`` CLI, the web console, the testing kit) ask of
it, once: describe and change topics, groups and their offsets, broker configs, partition
reassignments and log dirs, transactions, the cluster's brokers and health, and Kafka
Connect's REST API. The tools stand on this package; it imports neither of them.

Rules:

- A :class:`~strom.admin.session.Session` carries the settings of every call (bootstrap
  servers, timeout, client properties): no global state.
- Results are frozen dataclasses (or plain dicts/lists of them); formatting (text tables,
  JSON documents) is the caller's.
- Every failure is an :class:`~strom.admin.errors.AdminError` subclass with one readable
  sentence; nothing here prints, exits or parses a command line.
- APIs confluent-kafka does not offer go over :mod:`strom.admin.wire` (strom's codec, one
  request per connection), routed to the right broker by :mod:`strom.admin.routing`.

Modules: ``errors``, ``addresses`` (bootstrap lists, the connection preflight), ``session``,
``wire``, ``routing``, ``offsets``, ``timestamps``, ``topics``, ``log_dirs``,
``log_dir_moves``, ``reassign``, ``groups``, ``broker_configs``, ``transactions``, ``cluster``,
``connect``.
"""
