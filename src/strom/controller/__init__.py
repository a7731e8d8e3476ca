"""The cluster controller (issue 9): Kafka's ZooKeeper-mode controller on strom's metadata store.

- :mod:`.election`: the office (``/controller``, ``/controller_epoch``) and its fencing;
- :mod:`.controller`: the event queue, standing for election, the terms of office;
- :mod:`.term`: one term of office, the surface every event acts on;
- :mod:`.context`: what the active controller knows, and the leader-election rules;
- :mod:`.failover`: the start of a term;
- :mod:`.changes`: broker and topic changes seen by watches;
- :mod:`.partitions`: partition-state writes fenced by the controller epoch;
- :mod:`.channel` / :mod:`.batch`: LeaderAndIsr, UpdateMetadata and StopReplica to the brokers,
  through the network the broker provides (:class:`.channel.ControllerNetwork`);
- :mod:`.requests`: AlterPartition, ControlledShutdown, ElectLeaders, preferred rebalance;
- :mod:`.reassignment`: AlterPartitionReassignments / ListPartitionReassignments;
- :mod:`.deletion`: topic deletion;
- :mod:`.topics`: the topic documents any broker writes (creation, growth, deletion requests);
- :mod:`.admin`: the cluster path of CreateTopics / CreatePartitions / DeleteTopics;
- :mod:`.assignment`: replica assignment at creation (rack-aware);
- :mod:`.single_node`: a single node's stand-in for the admin APIs.

The controller never imports the broker: it reaches brokers through the
:class:`.channel.ControllerNetwork` it is given.
"""

from strom.controller.controller import Controller, NotControllerError
from strom.controller.settings import ControllerSettings

__all__ = ["Controller", "ControllerSettings", "NotControllerError"]
