package io.strom.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The classic consumer group protocol (group.protocol=classic) and positioning. */
class ConsumerTest {

  private static void produce(String topic, int partitions, int perPartition, long baseTs)
      throws Exception {
    try (KafkaProducer<String, String> p = new KafkaProducer<>(Strom.producerProps())) {
      for (int part = 0; part < partitions; part++) {
        for (int i = 0; i < perPartition; i++) {
          p.send(new ProducerRecord<>(topic, part, baseTs + i * 1000L, "k", part + ":" + i));
        }
      }
      p.flush();
    }
  }

  /** Records what a consumer's rebalance listener was told. */
  private static final class Listener implements ConsumerRebalanceListener {
    final Set<TopicPartition> owned = new HashSet<>();
    final List<Set<TopicPartition>> revoked = new ArrayList<>();

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
      if (!partitions.isEmpty()) {
        revoked.add(new HashSet<>(partitions));
      }
      owned.removeAll(partitions);
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
      owned.addAll(partitions);
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
      owned.removeAll(partitions);
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"range", "cooperative-sticky"})
  void twoMembersSplitThePartitionsAndReadEverythingOnce(String assignor) throws Exception {
    String topic = Strom.createTopic(Strom.unique("grp-" + assignor), 6);
    String group = Strom.unique("g-" + assignor);
    produce(topic, 6, 20, System.currentTimeMillis());
    Properties props = Strom.consumerProps(group);
    props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
        assignor.equals("range") ? RangeAssignor.class.getName()
            : CooperativeStickyAssignor.class.getName());
    props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5");
    props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
    props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
    Map<String, Integer> seen = new HashMap<>();
    Listener la = new Listener();
    Listener lb = new Listener();
    try (KafkaConsumer<String, String> a = new KafkaConsumer<>(props);
        KafkaConsumer<String, String> b = new KafkaConsumer<>(props)) {
      a.subscribe(List.of(topic), la);
      Strom.waitUntil(Duration.ofSeconds(30), "a owns all 6", () -> {
        a.poll(Duration.ofMillis(100)).forEach(r -> { });
        return la.owned.size() == 6;
      });
      // a has not committed: what it polled so far is read again after the rebalance; start
      // from the committed offsets (none) so every record is counted exactly once below
      a.seekToBeginning(a.assignment());
      b.subscribe(List.of(topic), lb);
      Strom.waitUntil(Duration.ofSeconds(60), "a and b share the 6 partitions", () -> {
        a.poll(Duration.ofMillis(100));
        b.poll(Duration.ofMillis(100));
        return la.owned.size() == 3 && lb.owned.size() == 3;
      });
      Set<TopicPartition> union = new HashSet<>(la.owned);
      union.addAll(lb.owned);
      assertEquals(new HashSet<>(Strom.partitions(topic, 6)), union);
      if (assignor.equals("range")) {
        assertTrue(la.revoked.stream().anyMatch(s -> s.size() == 6),
            "eager: a gave up all 6 partitions before the new assignment: " + la.revoked);
      } else {
        assertTrue(la.revoked.stream().allMatch(s -> s.size() <= 3 && !s.removeAll(la.owned)),
            "cooperative: a gave up only the partitions that moved: " + la.revoked);
      }
      a.seekToBeginning(a.assignment());
      b.seekToBeginning(b.assignment());
      long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
      while (seen.size() < 120 && System.nanoTime() < deadline) {
        for (KafkaConsumer<String, String> c : List.of(a, b)) {
          for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
            seen.merge(r.value(), 1, Integer::sum);
          }
          c.commitSync();
        }
      }
      assertEquals(120, seen.size(), "every record read");
      assertTrue(seen.values().stream().allMatch(n -> n == 1), "none read twice");
      Map<TopicPartition, OffsetAndMetadata> committed =
          a.committed(new HashSet<>(Strom.partitions(topic, 6)));
      for (TopicPartition tp : Strom.partitions(topic, 6)) {
        assertEquals(20L, committed.get(tp).offset(), "committed offset of " + tp);
      }
    }
  }

  @Test
  void staticMemberRejoinsWithoutARebalance() throws Exception {
    String topic = Strom.createTopic(Strom.unique("static"), 4);
    String group = Strom.unique("g-static");
    Properties props = Strom.consumerProps(group);
    props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "instance-1");
    props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000");
    Set<TopicPartition> first;
    int generation;
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props)) {
      c.subscribe(List.of(topic));
      Strom.waitUntil(Duration.ofSeconds(30), "assignment", () -> {
        c.poll(Duration.ofMillis(100));
        return c.assignment().size() == 4;
      });
      first = new HashSet<>(c.assignment());
      generation = c.groupMetadata().generationId();
      assertEquals("instance-1", c.groupMetadata().groupInstanceId().orElseThrow());
    }
    // a static member leaves no LeaveGroup behind: the same instance id comes back within its
    // session and is handed its old assignment in the same generation
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(props)) {
      c.subscribe(List.of(topic));
      Strom.waitUntil(Duration.ofSeconds(30), "assignment again", () -> {
        c.poll(Duration.ofMillis(100));
        return !c.assignment().isEmpty();
      });
      assertEquals(first, c.assignment());
      assertEquals(generation, c.groupMetadata().generationId(), "no new generation");
    }
  }

  @Test
  void seekAndOffsetsForTimes() throws Exception {
    String topic = Strom.createTopic(Strom.unique("seek"), 1);
    long base = 1_700_000_000_000L;
    produce(topic, 1, 10, base);
    TopicPartition tp = new TopicPartition(topic, 0);
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Strom.consumerProps(null))) {
      c.assign(List.of(tp));
      assertEquals(0L, c.beginningOffsets(List.of(tp)).get(tp));
      assertEquals(10L, c.endOffsets(List.of(tp)).get(tp));
      Map<TopicPartition, OffsetAndTimestamp> at = c.offsetsForTimes(Map.of(tp, base + 3500));
      assertEquals(4L, at.get(tp).offset(), "first record at or after the time");
      assertEquals(base + 4000, at.get(tp).timestamp());
      assertEquals(0L, c.offsetsForTimes(Map.of(tp, 0L)).get(tp).offset());
      assertNull(c.offsetsForTimes(Map.of(tp, base + 60_000)).get(tp), "nothing that late");

      c.seek(tp, at.get(tp).offset());
      List<ConsumerRecord<String, String>> got = Strom.pollUntil(c, 6, Duration.ofSeconds(20));
      assertEquals(List.of("0:4", "0:5", "0:6", "0:7", "0:8", "0:9"),
          got.stream().map(ConsumerRecord::value).toList());
      assertEquals(10L, c.position(tp));

      c.seekToBeginning(List.of(tp));
      assertEquals(0L, c.position(tp));
      assertEquals("0:0", Strom.pollUntil(c, 1, Duration.ofSeconds(20)).get(0).value());
      c.seekToEnd(List.of(tp));
      assertEquals(10L, c.position(tp));
      c.seek(tp, 7);
      assertEquals("0:7", Strom.pollUntil(c, 1, Duration.ofSeconds(20)).get(0).value());
    }
  }
}
