package io.strom.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.Test;

/** AdminClient against strom: every answer checked against what the test did. */
class AdminTest {

  private static void fill(String topic, int partitions, int perPartition) throws Exception {
    try (KafkaProducer<String, String> p = new KafkaProducer<>(Strom.producerProps())) {
      for (int part = 0; part < partitions; part++) {
        for (int i = 0; i < perPartition; i++) {
          p.send(new ProducerRecord<>(topic, part, "k", part + ":" + i));
        }
      }
    }
  }

  @Test
  void topicsAndPartitions() throws Exception {
    String topic = Strom.unique("adm-topic");
    try (Admin admin = Strom.admin()) {
      Strom.createTopic(admin, topic, 2, Map.of("retention.ms", "3600000"));
      assertTrue(admin.listTopics().names().get().contains(topic));
      TopicDescription desc = admin.describeTopics(List.of(topic)).allTopicNames().get()
          .get(topic);
      assertEquals(2, desc.partitions().size());
      assertFalse(desc.isInternal());
      assertNotNull(desc.topicId());
      for (TopicPartitionInfo p : desc.partitions()) {
        assertEquals(Strom.replication(), p.replicas().size());
        assertEquals(Strom.replication(), p.isr().size());
        assertTrue(p.replicas().contains(p.leader()));
      }
      // the same topic by id
      TopicDescription byId = admin.describeTopics(
          org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(desc.topicId())))
          .allTopicIds().get().get(desc.topicId());
      assertEquals(topic, byId.name());

      admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
      Strom.waitUntil(Duration.ofSeconds(30), "5 partitions", () -> {
        try {
          return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
              .partitions().size() == 5;
        } catch (Exception e) {
          return false;
        }
      });
      fill(topic, 5, 3);
      ListOffsetsResult.ListOffsetsResultInfo end = admin.listOffsets(
          Map.of(new TopicPartition(topic, 4), OffsetSpec.latest())).all().get()
          .get(new TopicPartition(topic, 4));
      assertEquals(3L, end.offset(), "the new partition takes writes");

      admin.deleteTopics(List.of(topic)).all().get();
      Strom.waitUntil(Duration.ofSeconds(30), "topic gone", () -> {
        try {
          return !admin.listTopics().names().get().contains(topic);
        } catch (Exception e) {
          return false;
        }
      });
      ExecutionException gone = org.junit.jupiter.api.Assertions.assertThrows(
          ExecutionException.class,
          () -> admin.describeTopics(List.of(topic)).allTopicNames().get());
      assertInstanceOf(UnknownTopicOrPartitionException.class, gone.getCause());
    }
  }

  @Test
  void topicConfigsDescribeAlterAndIncremental() throws Exception {
    String topic = Strom.unique("adm-cfg");
    ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
    try (Admin admin = Strom.admin()) {
      Strom.createTopic(admin, topic, 1, Map.of("retention.ms", "3600000",
          "cleanup.policy", "delete"));
      Config config = admin.describeConfigs(List.of(res)).all().get().get(res);
      assertEquals("3600000", config.get("retention.ms").value());
      assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG,
          config.get("retention.ms").source());
      assertEquals("1048588", config.get("max.message.bytes").value());
      assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG,
          config.get("max.message.bytes").source());

      admin.incrementalAlterConfigs(Map.of(res, List.of(
          new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
          new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"),
              AlterConfigOp.OpType.APPEND),
          new AlterConfigOp(new ConfigEntry("segment.bytes", "1048576"),
              AlterConfigOp.OpType.SET)))).all().get();
      config = admin.describeConfigs(List.of(res)).all().get().get(res);
      assertEquals("7200000", config.get("retention.ms").value());
      assertEquals(Set.of("delete", "compact"),
          Set.of(config.get("cleanup.policy").value().split(",")));
      assertEquals("1048576", config.get("segment.bytes").value());

      admin.incrementalAlterConfigs(Map.of(res, List.of(
          new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE),
          new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"),
              AlterConfigOp.OpType.SUBTRACT)))).all().get();
      config = admin.describeConfigs(List.of(res)).all().get().get(res);
      assertEquals("604800000", config.get("retention.ms").value(), "back to the default");
      assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, config.get("retention.ms").source());
      assertEquals("compact", config.get("cleanup.policy").value());

      // validateOnly changes nothing; a bad value is refused with Kafka's error
      admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
          new ConfigEntry("retention.ms", "1"), AlterConfigOp.OpType.SET))),
          new org.apache.kafka.clients.admin.AlterConfigsOptions().validateOnly(true)).all().get();
      assertEquals("604800000", admin.describeConfigs(List.of(res)).all().get().get(res)
          .get("retention.ms").value());
      ExecutionException bad = org.junit.jupiter.api.Assertions.assertThrows(
          ExecutionException.class, () -> admin.incrementalAlterConfigs(Map.of(res, List.of(
              new AlterConfigOp(new ConfigEntry("retention.ms", "soon"),
                  AlterConfigOp.OpType.SET)))).all().get());
      assertInstanceOf(org.apache.kafka.common.errors.InvalidConfigurationException.class,
          bad.getCause());

      // broker configs: read-only and dynamic entries of broker 'leader'
      Node node = admin.describeCluster().nodes().get().iterator().next();
      ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, node.idString());
      Config bc = admin.describeConfigs(List.of(broker)).all().get().get(broker);
      assertEquals(node.idString(), bc.get("node.id") != null ? bc.get("node.id").value()
          : bc.get("broker.id").value());
      assertNotNull(bc.get("log.retention.hours"));
    }
  }

  @Test
  void consumerGroupsAndOffsets() throws Exception {
    String topic = Strom.createTopic(Strom.unique("adm-grp"), 2);
    String group = Strom.unique("adm-g");
    fill(topic, 2, 10);
    TopicPartition p0 = new TopicPartition(topic, 0);
    TopicPartition p1 = new TopicPartition(topic, 1);
    try (Admin admin = Strom.admin()) {
      try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Strom.consumerProps(group))) {
        c.subscribe(List.of(topic));
        List<ConsumerRecord<String, String>> got = Strom.pollUntil(c, 20, Duration.ofSeconds(30));
        assertEquals(20, got.size());
        c.commitSync(Map.of(p0, new OffsetAndMetadata(7, "meta-0"), p1,
            new OffsetAndMetadata(10)));
        Collection<GroupListing> groups = admin.listGroups().all().get();
        assertTrue(groups.stream().anyMatch(g -> g.groupId().equals(group)
            && g.groupState().orElseThrow() == GroupState.STABLE), "listed Stable: " + groups);
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get()
            .get(group);
        assertEquals(GroupState.STABLE, d.groupState());
        assertEquals(1, d.members().size());
        assertEquals(Set.of(p0, p1), d.members().iterator().next().assignment().topicPartitions());
        ExecutionException busy = org.junit.jupiter.api.Assertions.assertThrows(
            ExecutionException.class, () -> admin.deleteConsumerGroups(List.of(group)).all().get());
        assertInstanceOf(GroupNotEmptyException.class, busy.getCause());
      }
      Map<TopicPartition, OffsetAndMetadata> offsets =
          admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
      assertEquals(7L, offsets.get(p0).offset());
      assertEquals("meta-0", offsets.get(p0).metadata());
      assertEquals(10L, offsets.get(p1).offset());

      admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(2))).all().get();
      admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all().get();
      offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
      assertEquals(Set.of(p0), offsets.keySet());
      assertEquals(2L, offsets.get(p0).offset());
      ConsumerGroupDescription empty = admin.describeConsumerGroups(List.of(group)).all().get()
          .get(group);
      assertEquals(GroupState.EMPTY, empty.groupState());

      admin.deleteConsumerGroups(List.of(group)).all().get();
      assertFalse(admin.listGroups().all().get().stream()
          .anyMatch(g -> g.groupId().equals(group)));
    }
  }

  @Test
  void deleteRecordsMovesTheLogStartOffset() throws Exception {
    String topic = Strom.createTopic(Strom.unique("adm-del"), 1);
    fill(topic, 1, 10);
    TopicPartition tp = new TopicPartition(topic, 0);
    try (Admin admin = Strom.admin()) {
      var low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(6))).lowWatermarks()
          .get(tp).get();
      assertEquals(6L, low.lowWatermark());
      assertEquals(6L, admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get().get(tp)
          .offset());
    }
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Strom.consumerProps(null))) {
      List<ConsumerRecord<String, String>> rest =
          Strom.readAll(c, List.of(tp), Duration.ofSeconds(30));
      assertEquals(List.of("0:6", "0:7", "0:8", "0:9"),
          rest.stream().map(ConsumerRecord::value).toList());
    }
  }

  @Test
  void listOffsetsSpecs() throws Exception {
    String topic = Strom.createTopic(Strom.unique("adm-lo"), 1);
    TopicPartition tp = new TopicPartition(topic, 0);
    long base = 1_700_000_000_000L;
    try (KafkaProducer<String, String> p = new KafkaProducer<>(Strom.producerProps())) {
      for (int i = 0; i < 5; i++) {
        // the largest timestamp is at offset 2
        p.send(new ProducerRecord<>(topic, 0, base + (i == 2 ? 99_000 : i * 1000L), "k", "v" + i));
      }
    }
    try (Admin admin = Strom.admin()) {
      assertEquals(0L, admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get().get(tp)
          .offset());
      assertEquals(5L, admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp)
          .offset());
      var max = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).all().get().get(tp);
      assertEquals(2L, max.offset());
      assertEquals(base + 99_000, max.timestamp());
      // the first offset whose timestamp is at or after the time: 2 (its 99 s), not 3
      assertEquals(2L, admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(base + 2500)))
          .all().get().get(tp).offset());
      assertEquals(-1L, admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(base + 99_001)))
          .all().get().get(tp).offset(), "nothing that late");
    }
  }

  @Test
  void describeClusterAndLogDirs() throws Exception {
    String topic = Strom.createTopic(Strom.unique("adm-dirs"), 2);
    fill(topic, 2, 5);
    try (Admin admin = Strom.admin()) {
      DescribeClusterResult cluster = admin.describeCluster();
      Collection<Node> nodes = cluster.nodes().get();
      assertEquals(Strom.brokers(), nodes.size());
      Node controller = cluster.controller().get();
      assertTrue(nodes.stream().anyMatch(n -> n.id() == controller.id()), "controller listed");
      assertNotNull(cluster.clusterId().get());
      Set<String> hosts = Set.of(Strom.bootstrap().split(","));
      for (Node n : nodes) {
        assertTrue(hosts.contains(n.host() + ":" + n.port()), n + " advertised as bootstrapped");
      }
      List<Integer> ids = nodes.stream().map(Node::id).collect(Collectors.toList());
      Map<Integer, Map<String, LogDirDescription>> dirs =
          admin.describeLogDirs(ids).allDescriptions().get();
      int replicas = 0;
      for (Map<String, LogDirDescription> byDir : dirs.values()) {
        for (LogDirDescription dir : byDir.values()) {
          assertEquals(null, dir.error());
          for (Map.Entry<TopicPartition, ReplicaInfo> e : dir.replicaInfos().entrySet()) {
            if (e.getKey().topic().equals(topic)) {
              replicas++;
              assertTrue(e.getValue().size() > 0, "5 records take bytes: " + e);
            }
          }
        }
      }
      assertEquals(2 * Strom.replication(), replicas, "every replica in one log dir");
    }
  }

  @Test
  void electLeadersAndReassignPartitions() throws Exception {
    String topic = Strom.createTopic(Strom.unique("adm-elect"), 1);
    TopicPartition tp = new TopicPartition(topic, 0);
    fill(topic, 1, 5);
    try (Admin admin = Strom.admin()) {
      // the preferred leader already leads: Kafka answers ELECTION_NOT_NEEDED
      Map<TopicPartition, Optional<Throwable>> result =
          admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions().get();
      assertInstanceOf(ElectionNotNeededException.class, result.get(tp).orElseThrow());
      assertTrue(admin.listPartitionReassignments().reassignments().get().isEmpty());

      List<Integer> replicas = admin.describeTopics(List.of(topic)).allTopicNames().get()
          .get(topic).partitions().get(0).replicas().stream().map(Node::id).toList();
      // move the replicas: reversed order on a cluster (a new preferred leader), the same
      // single replica on one broker; Kafka completes both
      List<Integer> target = new ArrayList<>(replicas);
      java.util.Collections.reverse(target);
      admin.alterPartitionReassignments(Map.of(tp, Optional.of(
          new NewPartitionReassignment(target)))).all().get();
      Strom.waitUntil(Duration.ofSeconds(60), "reassignment done", () -> {
        try {
          return admin.listPartitionReassignments().reassignments().get().isEmpty()
              && admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                  .partitions().get(0).replicas().stream().map(Node::id).toList()
                  .equals(target);
        } catch (Exception e) {
          return false;
        }
      });
      if (target.size() > 1) {
        Map<TopicPartition, Optional<Throwable>> elected =
            admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions().get();
        assertTrue(elected.get(tp).isEmpty() || elected.get(tp).get()
            instanceof ElectionNotNeededException, "elected: " + elected);
        Strom.waitUntil(Duration.ofSeconds(30), "the new preferred replica leads", () -> {
          try {
            return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                .partitions().get(0).leader().id() == target.get(0);
          } catch (Exception e) {
            return false;
          }
        });
      }
      assertEquals(5L, admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp)
          .offset(), "nothing lost on the way");
    }
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Strom.consumerProps(null))) {
      assertEquals(5, Strom.readAll(c, List.of(tp), Duration.ofSeconds(30)).size());
    }
  }
}
