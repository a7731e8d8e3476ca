"""The partition layer: which replica leads, who is in sync, when a write is committed.

Between :mod:`strom.storage` (the logs) and :mod:`strom.broker` (the network and the
handlers), as Kafka's ``ReplicaManager`` / ``Partition`` / ``AlterPartitionManager`` and
Redpanda's ``cluster/`` sit between their storage and their RPC layer. It depends only on
``storage``, ``metadata``, ``protocol`` and the process-wide ``strom.clock`` / ``strom.config`` /
``strom.periodic``; nothing here imports the broker or the controller.

- :mod:`.partition`: one hosted partition's state (leader, epochs, ISR, high watermark);
- :mod:`.replica_manager`: every hosted partition; appends, reads, the controller's commands
  (:mod:`.commands`: LeaderAndIsr, UpdateMetadata, StopReplica as typed values);
- :mod:`.replica_fetcher`: followers copying their leaders;
- :mod:`.isr_changes`: AlterPartition to the controller;
- :mod:`.purgatory` / :mod:`.delayed_produce`: long-poll Fetch and acks=all waiting;
- :mod:`.metadata_cache`: what the controller said of the cluster;
- :mod:`.coordinator_partitions`: leadership of internal-topic partitions, for the coordinators;
- :mod:`.local_leadership`: a single node leading what it hosts;
- :mod:`.replica_selector`: KIP-392's closest replica for a consumer;
- :mod:`.connection` / :mod:`.peers`: connections to other brokers;
- :mod:`.service`: the layer's start-up, periodic work and shutdown;
- :mod:`.task_stop`: stopping a long-running task for sure.
"""
