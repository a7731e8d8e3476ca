"""The cluster controller (issue 9): Kafka's ZooKeeper-mode controller on strom's metadata store.

- :mod:`.election`: the office (``/controller``, ``/controller_epoch``) and its fencing;
- :mod:`.context`: what the active controller knows, and the leader-election rules;
- :mod:`.controller`: the event queue, the office's terms, failover;
- :mod:`.changes`: broker and topic changes seen by watches;
- :mod:`.admin`: the cluster path of CreateTopics / CreatePartitions / DeleteTopics;
- :mod:`.partitions`: partition-state writes fenced by the controller epoch;
- :mod:`.channel` / :mod:`.batch`: LeaderAndIsr, UpdateMetadata and StopReplica to the brokers;
- :mod:`.requests`: AlterPartition, ControlledShutdown, ElectLeaders, preferred rebalance;
- :mod:`.reassignment`: AlterPartitionReassignments / ListPartitionReassignments;
- :mod:`.topics`: topic creation, growth and deletion through the store;
- :mod:`.assignment`: replica assignment at creation (rack-aware);
- :mod:`.service`: the controller in the broker process, and controlled shutdown on SIGTERM.
"""

from strom.controller.controller import Controller, ControllerSettings, NotControllerError

__all__ = ["Controller", "ControllerSettings", "NotControllerError"]
