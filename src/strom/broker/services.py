"""What a request handler may use: one frozen set of narrow, typed services.

The assembly (:mod:`strom.broker.assembly`) builds every service, then one
:class:`BrokerServices`, and every :class:`~strom.broker.context.RequestContext` carries it.
A handler reaches only what is listed here — never the assembly, never a service looked up by
name — so what each API may touch is visible in its module and checked by mypy.

The services, by what a handler does with them:

- ``node``: who this broker is (:class:`~strom.broker.node.NodeIdentity`: id, cluster id, advertised address,
  rack, listen address, log directories);
- ``config`` / ``configs``: the broker's config as in force now, and its dynamic layers
  (:class:`~strom.broker.dynamic_config.DynamicConfig`: DescribeConfigs, AlterConfigs);
- ``clock``, ``metrics``: time, and the request / topic / replication counters;
- ``replicas``: the partition layer (:class:`~strom.replication.replica_manager.ReplicaManager`:
  leaders, appends, reads' bounds, the purgatories, the metadata cache, the controller's
  commands);
- ``logs``: the log manager, for reads and log-directory questions;
- ``topics``: the topic registry's view and creation, growth, deletion on this node or through
  the controller (:class:`~strom.broker.topics.Topics`), ``internal_topics`` the single-flight
  creation of ``__consumer_offsets`` / ``__transaction_state``;
- ``groups`` / ``transactions``: the group and transaction coordinators' services;
- ``shares``: share groups (KIP-932, :class:`~strom.broker.share.service.ShareService`): their
  membership, the share-partitions led here, the share coordinator;
- ``producer_ids``: blocks of producer ids from the metadata store;
- ``controller``: the way to the controller's work (:class:`~strom.broker.controller_channel.ControllerChannel`);
- ``log_mover``: replica moves between log directories (AlterReplicaLogDirs);
- ``fetch_sessions`` / ``metadata_answers``: per-broker caches of the Fetch and Metadata
  handlers;
- ``replica_selector``: KIP-392's choice of a follower for a consumer (None: the leader);
- ``scram``: users' SCRAM credentials (:class:`~strom.security.scram_credentials.ScramCredentials`:
  the logins' cache, DescribeUserScramCredentials / AlterUserScramCredentials);
- ``quotas``: client quotas (:class:`~strom.security.quota_store.QuotaStore`: every entity's
  quota configs kept from the metadata store, their alteration, and in ``quotas.quotas`` the
  rates the connections record and the throttle times they compute);
- ``authorizer``: the ACL decisions (:class:`~strom.security.acl.authorizer.Authorizer`), None
  when ``authorizer.class.name`` is empty (everything allowed; the ACL APIs answer
  SECURITY_DISABLED); handlers ask it through the context's ``authorize*`` helpers
  (:mod:`strom.broker.authz`) before acting, as Kafka's ``authHelper`` does;
- ``acls``: the ACLs in the metadata store (:class:`~strom.security.acl.store.AclStore`), for
  CreateAcls / DeleteAcls; None with no authorizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.broker.controller_channel import ControllerChannel
    from strom.broker.dynamic_config import DynamicConfig
    from strom.broker.fetch_session import FetchSessionCache
    from strom.broker.group.service import GroupService
    from strom.broker.internal_topics import InternalTopics
    from strom.broker.log_mover import LogMover
    from strom.broker.metadata_answers import MetadataAnswers
    from strom.broker.node import NodeIdentity
    from strom.broker.observability.metrics import BrokerMetrics
    from strom.broker.producer_ids import ProducerIdManager
    from strom.broker.share.service import ShareService
    from strom.broker.topics import Topics
    from strom.broker.txn.service import TxnService
    from strom.clock import Clock
    from strom.config import BrokerConfig
    from strom.replication.replica_manager import ReplicaManager
    from strom.security.acl.authorizer import Authorizer
    from strom.security.acl.store import AclStore
    from strom.security.quota_store import QuotaStore
    from strom.security.scram_credentials import ScramCredentials
    from strom.storage.log_manager import LogManager


@dataclass(frozen=True, slots=True)
class BrokerServices:
    node: NodeIdentity
    config: BrokerConfig
    configs: DynamicConfig
    clock: Clock
    metrics: BrokerMetrics
    replicas: ReplicaManager
    logs: LogManager
    topics: Topics
    internal_topics: InternalTopics
    groups: GroupService
    transactions: TxnService
    producer_ids: ProducerIdManager
    controller: ControllerChannel
    log_mover: LogMover
    fetch_sessions: FetchSessionCache
    metadata_answers: MetadataAnswers
    replica_selector: str | None  # a selector of strom.replication.replica_selector
    shares: ShareService
    scram: ScramCredentials
    quotas: QuotaStore
    authorizer: Authorizer | None = None
    acls: AclStore | None = None
