package io.strom.jvm;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * What every JVM test needs to know about the strom broker (or cluster) under test.
 *
 * <p>tests/jvm starts the brokers and passes {@code -Dstrom.bootstrap=host:port,...} and
 * {@code -Dstrom.brokers=N} (1 for a single broker, 3 for the cluster); without
 * {@code strom.bootstrap} every test is skipped (so {@code mvn test} alone does not fail).
 */
final class Strom {
  private Strom() {}

  static String bootstrap() {
    String servers = System.getProperty("strom.bootstrap", System.getenv("STROM_BOOTSTRAP"));
    assumeTrue(servers != null && !servers.isBlank(), "no strom.bootstrap given");
    return servers;
  }

  /** How many brokers the cluster under test has (1: a single broker). */
  static int brokers() {
    return Integer.parseInt(System.getProperty("strom.brokers", "1"));
  }

  /** The replication factor topics get: 3 on the cluster (min.insync 2 makes acks=all real). */
  static short replication() {
    return (short) Math.min(3, brokers());
  }

  /** A name no other test uses. */
  static String unique(String base) {
    return base + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  static Properties common() {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap());
    return p;
  }

  static Admin admin() {
    Properties p = common();
    p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "30000");
    p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
    return Admin.create(p);
  }

  static Properties producerProps() {
    Properties p = common();
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
    p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
    return p;
  }

  static Properties consumerProps(String group) {
    Properties p = common();
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    if (group != null) {
      p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    }
    return p;
  }

  /** Creates a topic (replication {@link #replication()}) and waits until it has leaders. */
  static String createTopic(Admin admin, String name, int partitions, Map<String, String> configs)
      throws Exception {
    NewTopic topic = new NewTopic(name, partitions, replication());
    Map<String, String> all = new HashMap<>();
    if (replication() > 1) {
      all.put("min.insync.replicas", "2");
    }
    all.putAll(configs);
    admin.createTopics(List.of(topic.configs(all))).all().get();
    waitUntil(Duration.ofSeconds(30), "leaders of " + name, () -> {
      try {
        var desc = admin.describeTopics(List.of(name)).allTopicNames().get().get(name);
        return desc.partitions().size() == partitions
            && desc.partitions().stream().allMatch(p -> p.leader() != null && p.leader().id() >= 0);
      } catch (Exception e) {
        return false;
      }
    });
    return name;
  }

  static String createTopic(String name, int partitions) throws Exception {
    try (Admin admin = admin()) {
      return createTopic(admin, name, partitions, Map.of());
    }
  }

  static void waitUntil(Duration timeout, String what, BooleanSupplier condition)
      throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError(what + ": not within " + timeout);
      }
      Thread.sleep(100);
    }
  }

  /** Polls {@code consumer} until {@code count} records came (or the timeout: what came). */
  static <K, V> List<ConsumerRecord<K, V>> pollUntil(
      KafkaConsumer<K, V> consumer, int count, Duration timeout) {
    List<ConsumerRecord<K, V>> out = new ArrayList<>();
    long deadline = System.nanoTime() + timeout.toNanos();
    while (out.size() < count && System.nanoTime() < deadline) {
      consumer.poll(Duration.ofMillis(200)).forEach(out::add);
    }
    return out;
  }

  /** Every record of {@code partitions} from the start to their end offsets now. */
  static <K, V> List<ConsumerRecord<K, V>> readAll(
      KafkaConsumer<K, V> consumer, Collection<TopicPartition> partitions, Duration timeout) {
    consumer.assign(partitions);
    consumer.seekToBeginning(partitions);
    Map<TopicPartition, Long> end = consumer.endOffsets(partitions);
    List<ConsumerRecord<K, V>> out = new ArrayList<>();
    long deadline = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() < deadline) {
      boolean done = true;
      for (TopicPartition tp : partitions) {
        if (consumer.position(tp) < end.get(tp)) {
          done = false;
        }
      }
      if (done) {
        break;
      }
      consumer.poll(Duration.ofMillis(200)).forEach(out::add);
    }
    return out;
  }

  static List<TopicPartition> partitions(String topic, int count) {
    List<TopicPartition> out = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      out.add(new TopicPartition(topic, i));
    }
    return out;
  }
}
