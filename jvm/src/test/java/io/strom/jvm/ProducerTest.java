package io.strom.jvm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/** The Java producer: what it sends is what a consumer reads back, in order, nothing more. */
class ProducerTest {

  /** Sends {@code count} keyed records with {@code props} and returns their metadata. */
  private static List<RecordMetadata> send(Properties props, String topic, int count)
      throws Exception {
    List<Future<RecordMetadata>> futures = new ArrayList<>();
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
      for (int i = 0; i < count; i++) {
        futures.add(producer.send(new ProducerRecord<>(topic, "k" + (i % 7), "v" + i)));
      }
      producer.flush();
    }
    List<RecordMetadata> out = new ArrayList<>();
    for (Future<RecordMetadata> f : futures) {
      out.add(f.get());
    }
    return out;
  }

  /** Reads {@code topic} whole and checks it holds exactly v0..v(count-1), per key in order. */
  private static List<ConsumerRecord<String, String>> readBack(String topic, int partitions,
      int count) {
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Strom.consumerProps(null))) {
      List<ConsumerRecord<String, String>> records =
          Strom.readAll(c, Strom.partitions(topic, partitions), Duration.ofSeconds(30));
      assertEquals(count, records.size(), "records read back");
      // per key, values come in the order they were sent (one key maps to one partition)
      Map<String, Integer> last = new java.util.HashMap<>();
      java.util.Set<String> values = new java.util.HashSet<>();
      for (ConsumerRecord<String, String> r : records) {
        int n = Integer.parseInt(r.value().substring(1));
        assertEquals("k" + (n % 7), r.key());
        Integer prev = last.put(r.key(), n);
        assertTrue(prev == null || prev < n, "key " + r.key() + ": " + prev + " then " + n);
        values.add(r.value());
      }
      assertEquals(count, values.size(), "distinct values");
      return records;
    }
  }

  @ParameterizedTest(name = "acks={0}")
  @ValueSource(strings = {"0", "1", "all"})
  void acks(String acks) throws Exception {
    String topic = Strom.createTopic(Strom.unique("acks" + acks), 3);
    Properties p = Strom.producerProps();
    p.put(ProducerConfig.ACKS_CONFIG, acks);
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
    List<RecordMetadata> meta = send(p, topic, 300);
    List<ConsumerRecord<String, String>> read = readBack(topic, 3, 300);
    if (!acks.equals("0")) { // acks=0 gets no offsets back (-1): nothing to compare
      for (int i = 0; i < meta.size(); i++) {
        RecordMetadata m = meta.get(i);
        ConsumerRecord<String, String> r = read.stream()
            .filter(x -> x.partition() == m.partition() && x.offset() == m.offset())
            .findFirst().orElseThrow();
        assertEquals("v" + i, r.value(), "the record at the acknowledged offset");
      }
    } else {
      assertTrue(meta.stream().allMatch(m -> m.offset() == -1));
    }
  }

  @Test
  void idempotentProducerOffsetsAreDenseAndUnique() throws Exception {
    String topic = Strom.createTopic(Strom.unique("idem"), 2);
    Properties p = Strom.producerProps();
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
    p.put(ProducerConfig.BATCH_SIZE_CONFIG, "512"); // many small batches in flight at once
    List<RecordMetadata> meta = send(p, topic, 2000);
    readBack(topic, 2, 2000);
    for (int part = 0; part < 2; part++) {
      final int pp = part;
      long[] offsets = meta.stream().filter(m -> m.partition() == pp)
          .mapToLong(RecordMetadata::offset).toArray();
      for (int i = 0; i < offsets.length; i++) {
        assertEquals(i, offsets[i], "partition " + pp + ": offsets in send order, no gap");
      }
    }
  }

  @ParameterizedTest(name = "compression={0}")
  @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
  void compression(String codec) throws Exception {
    String topic = Strom.createTopic(Strom.unique("codec-" + codec), 1);
    Properties p = Strom.producerProps();
    p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
    p.put(ProducerConfig.LINGER_MS_CONFIG, "20");
    List<RecordMetadata> meta = send(p, topic, 500);
    assertEquals(499, meta.get(499).offset());
    readBack(topic, 1, 500);
  }

  @Test
  void headersAndTimestamps() throws Exception {
    String topic = Strom.createTopic(Strom.unique("hdr"), 1);
    long base = 1_700_000_000_000L;
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(Strom.producerProps())) {
      for (int i = 0; i < 20; i++) {
        List<Header> headers = List.of(
            new RecordHeader("n", Integer.toString(i).getBytes(StandardCharsets.UTF_8)),
            new RecordHeader("dup", "a".getBytes(StandardCharsets.UTF_8)),
            new RecordHeader("dup", "b".getBytes(StandardCharsets.UTF_8)),
            new RecordHeader("null", null));
        producer.send(new ProducerRecord<>(topic, 0, base + i * 1000L, i % 2 == 0 ? null : "k",
            "v" + i, headers)).get();
      }
    }
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Strom.consumerProps(null))) {
      var records = Strom.readAll(c, Strom.partitions(topic, 1), Duration.ofSeconds(30));
      assertEquals(20, records.size());
      for (int i = 0; i < 20; i++) {
        ConsumerRecord<String, String> r = records.get(i);
        assertEquals("v" + i, r.value());
        assertEquals(i % 2 == 0 ? null : "k", r.key());
        assertEquals(TimestampType.CREATE_TIME, r.timestampType());
        assertEquals(base + i * 1000L, r.timestamp());
        Header[] hs = r.headers().toArray();
        assertEquals(4, hs.length);
        assertEquals("n", hs[0].key());
        assertArrayEquals(Integer.toString(i).getBytes(StandardCharsets.UTF_8), hs[0].value());
        assertArrayEquals("a".getBytes(StandardCharsets.UTF_8), hs[1].value());
        assertArrayEquals("b".getBytes(StandardCharsets.UTF_8), hs[2].value());
        assertEquals("null", hs[3].key());
        assertEquals(null, hs[3].value());
      }
    }
  }

  @Test
  void logAppendTimeTopicStampsRecordsWithTheBrokersClock() throws Exception {
    String topic;
    try (Admin admin = Strom.admin()) {
      topic = Strom.createTopic(admin, Strom.unique("lat"), 1,
          Map.of("message.timestamp.type", "LogAppendTime"));
    }
    long before = System.currentTimeMillis();
    RecordMetadata meta;
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(Strom.producerProps())) {
      meta = producer.send(new ProducerRecord<>(topic, 0, 1000L, "k", "v")).get();
    }
    long after = System.currentTimeMillis();
    assertTrue(meta.timestamp() >= before - 5000 && meta.timestamp() <= after + 5000,
        "the producer is told the broker's append time, not 1000: " + meta.timestamp());
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(Strom.consumerProps(null))) {
      var r = Strom.readAll(c, Strom.partitions(topic, 1), Duration.ofSeconds(30)).get(0);
      assertEquals(TimestampType.LOG_APPEND_TIME, r.timestampType());
      assertEquals(meta.timestamp(), r.timestamp());
    }
  }
}
