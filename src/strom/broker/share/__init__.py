"""Share groups (KIP-932, as in Kafka 4.2): queues on top of topics.

A share group's members all read the same partitions; each record is *acquired* by one member
under a time-limited lock and acknowledged on its own (ACCEPT, RELEASE, REJECT). The package's
parts, each with one job:

- :mod:`~strom.broker.share.records` / :mod:`~strom.broker.share.group_records`: Kafka's
  record formats in ``__share_group_state`` and, for share groups, in ``__consumer_offsets``;
- :mod:`~strom.broker.share.state`: a share-partition's persisted state (start offset and
  state batches) and how deltas combine;
- :mod:`~strom.broker.share.coordinator`: the share coordinator as a state machine (the
  share-group state APIs 83–87 over ``__share_group_state``);
- :mod:`~strom.broker.share.state_service`: that coordinator as a broker service (loading,
  appends, pruning, cold snapshots);
- :mod:`~strom.broker.share.persister`: the client side of the state APIs (local call or
  inter-broker request to the coordinator's broker);
- :mod:`~strom.broker.share.partition`: one share-partition at its leader (acquisition,
  locks, acknowledgements, the SPSO/SPEO window);
- :mod:`~strom.broker.share.sessions`: ShareFetch's share sessions;
- :mod:`~strom.broker.share.manager`: the share-partitions of this broker, their loading,
  lock expiry and the long-poll of ShareFetch;
- :mod:`~strom.broker.share.groups`: share-group membership at the group coordinator
  (ShareGroupHeartbeat, server-side assignment);
- :mod:`~strom.broker.share.service`: all of it as one broker service (``ctx.shares``).
"""
