package io.strom.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.Test;

/** Share groups (KIP-932): KafkaShareConsumer and the Admin client's share-group calls. */
class ShareConsumerTest {

  private static void earliest(Admin admin, String group) throws Exception {
    ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
    AlterConfigOp op = new AlterConfigOp(
        new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
    admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
  }

  private static List<String> produce(String topic, int count) throws Exception {
    List<String> values = new ArrayList<>();
    Properties props = Strom.producerProps();
    props.put("batch.size", "16"); // one record per batch: whole batches are acquired
    try (KafkaProducer<String, String> p = new KafkaProducer<>(props)) {
      for (int i = 0; i < count; i++) {
        values.add(topic + "-" + i);
        p.send(new ProducerRecord<>(topic, 0, null, values.get(i)));
      }
      p.flush();
    }
    return values;
  }

  private static KafkaShareConsumer<String, String> consumer(String group, boolean explicit) {
    Properties p = Strom.common();
    p.put("group.id", group);
    p.put("key.deserializer", StringDeserializer.class.getName());
    p.put("value.deserializer", StringDeserializer.class.getName());
    p.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
    p.put("max.poll.records", "5");
    return new KafkaShareConsumer<>(p);
  }

  @Test
  void threeConsumersShareOnePartitionAndEachRecordReachesOne() throws Exception {
    String topic = Strom.createTopic(Strom.unique("share-three"), 1);
    String group = Strom.unique("share-three-g");
    try (Admin admin = Strom.admin()) {
      earliest(admin, group);
    }
    List<String> values = produce(topic, 90);
    Map<String, AtomicInteger> seen = new ConcurrentHashMap<>();
    Map<String, Set<String>> byConsumer = new ConcurrentHashMap<>();
    AtomicInteger total = new AtomicInteger();
    List<Thread> threads = new ArrayList<>();
    for (int c = 0; c < 3; c++) {
      String name = "c" + c;
      byConsumer.put(name, ConcurrentHashMap.newKeySet());
      Thread t = new Thread(() -> {
        try (KafkaShareConsumer<String, String> consumer = consumer(group, false)) {
          consumer.subscribe(List.of(topic));
          long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
          while (total.get() < values.size() && System.nanoTime() < deadline) {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
              seen.computeIfAbsent(r.value(), v -> new AtomicInteger()).incrementAndGet();
              byConsumer.get(name).add(r.value());
              total.incrementAndGet();
              Thread.sleep(5); // the work
            }
          }
          consumer.commitSync();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      });
      threads.add(t);
      t.start();
    }
    for (Thread t : threads) {
      t.join(90_000);
    }
    assertEquals(new HashSet<>(values), seen.keySet());
    seen.forEach((v, n) -> assertEquals(1, n.get(), v + " delivered " + n.get() + " times"));
    byConsumer.forEach((c, got) -> assertTrue(!got.isEmpty(), c + " got no work"));
  }

  @Test
  void releaseRedeliversWithAHigherCountAndRejectNeverReturns() throws Exception {
    String topic = Strom.createTopic(Strom.unique("share-acks"), 1);
    String group = Strom.unique("share-acks-g");
    try (Admin admin = Strom.admin()) {
      earliest(admin, group);
    }
    List<String> values = produce(topic, 10);
    Map<String, List<Short>> counts = new HashMap<>();
    Set<String> released = new HashSet<>();
    try (KafkaShareConsumer<String, String> consumer = consumer(group, true)) {
      consumer.subscribe(List.of(topic));
      long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
      while (counts.values().stream().mapToInt(List::size).sum() < 11
          && System.nanoTime() < deadline) {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
          short count = r.deliveryCount().orElse((short) -1);
          counts.computeIfAbsent(r.value(), v -> new ArrayList<>()).add(count);
          if (r.value().equals(values.get(3))) {
            consumer.acknowledge(r, AcknowledgeType.REJECT);
          } else if (r.value().equals(values.get(7)) && released.add(r.value())) {
            consumer.acknowledge(r, AcknowledgeType.RELEASE);
          } else {
            consumer.acknowledge(r, AcknowledgeType.ACCEPT);
          }
        }
        consumer.commitSync().forEach((tp, error) -> assertTrue(error.isEmpty(), tp + ": " + error));
      }
      for (int i = 0; i < 5; i++) { // nothing left: a rejected record would come back now
        consumer.poll(Duration.ofMillis(200)).forEach(r -> counts.get(r.value()).add((short) 99));
      }
    }
    assertEquals(new HashSet<>(values), counts.keySet());
    assertEquals(List.of((short) 1, (short) 2), counts.get(values.get(7)));
    assertEquals(List.of((short) 1), counts.get(values.get(3)));
    counts.forEach((v, n) -> assertTrue(n.size() == 1 || v.equals(values.get(7)), v + ": " + n));
  }

  @Test
  void adminListsDescribesAltersAndDeletesShareGroups() throws Exception {
    String topic = Strom.createTopic(Strom.unique("share-admin"), 1);
    String group = Strom.unique("share-admin-g");
    try (Admin admin = Strom.admin()) {
      earliest(admin, group);
      List<String> values = produce(topic, 8);
      try (KafkaShareConsumer<String, String> consumer = consumer(group, false)) {
        consumer.subscribe(List.of(topic));
        int got = 0;
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (got < values.size() && System.nanoTime() < deadline) {
          got += consumer.poll(Duration.ofMillis(200)).count();
        }
        assertEquals(values.size(), got);
        consumer.commitSync();
        ShareGroupDescription live = admin.describeShareGroups(List.of(group)).all().get().get(group);
        assertEquals(GroupState.STABLE, live.groupState());
        assertEquals(1, live.members().size());
        assertEquals(Set.of(new TopicPartition(topic, 0)),
            live.members().iterator().next().assignment().topicPartitions());
      }
      Strom.waitUntil(Duration.ofSeconds(30), group + " empty", () -> {
        try {
          return admin.describeShareGroups(List.of(group)).all().get().get(group).groupState()
              == GroupState.EMPTY;
        } catch (Exception e) {
          return false;
        }
      });
      Set<String> listed = new HashSet<>();
      for (GroupListing g : admin.listGroups(ListGroupsOptions.forShareGroups()).all().get()) {
        assertEquals(Optional.of(GroupType.SHARE), g.type());
        listed.add(g.groupId());
      }
      assertTrue(listed.contains(group), listed.toString());
      TopicPartition tp = new TopicPartition(topic, 0);
      Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin.listShareGroupOffsets(
          Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get();
      assertEquals(Set.of(tp), offsets.keySet());
      assertEquals(8L, offsets.get(tp).startOffset());
      assertEquals(Optional.of(0L), offsets.get(tp).lag());
      admin.alterShareGroupOffsets(group, Map.of(tp, 2L)).all().get();
      Map<TopicPartition, SharePartitionOffsetInfo> reset = admin.listShareGroupOffsets(
          Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get();
      assertEquals(2L, reset.get(tp).startOffset());
      assertEquals(Optional.of(6L), reset.get(tp).lag());
      admin.deleteShareGroupOffsets(group, Set.of(topic)).all().get();
      admin.deleteShareGroups(Collections.singletonList(group)).all().get();
      Set<String> after = new HashSet<>();
      admin.listGroups(ListGroupsOptions.forShareGroups()).all().get()
          .forEach(g -> after.add(g.groupId()));
      assertTrue(!after.contains(group), after.toString());
    }
  }
}
