package io.strom.jvm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.Test;

/** Transactions: consume-transform-produce with sendOffsetsToTransaction, read_committed. */
class TransactionsTest {

  private static Properties txnProducer(String txnId) {
    Properties p = Strom.producerProps();
    p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
    p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
    return p;
  }

  private static Properties reader(String isolation) {
    Properties p = Strom.consumerProps(null);
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
    return p;
  }

  @Test
  void consumeTransformProduceCommitsOutputAndOffsetsTogether() throws Exception {
    String in = Strom.unique("txn-in");
    String out = Strom.unique("txn-out");
    String group = Strom.unique("txn-group");
    try (Admin admin = Strom.admin()) {
      Strom.createTopic(admin, in, 2, Map.of());
      Strom.createTopic(admin, out, 2, Map.of());
    }
    try (KafkaProducer<String, String> p = new KafkaProducer<>(Strom.producerProps())) {
      for (int i = 0; i < 100; i++) {
        p.send(new ProducerRecord<>(in, i % 2, "k" + i, Integer.toString(i)));
      }
    }
    Properties cp = Strom.consumerProps(group);
    cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10");
    int processed = 0;
    int aborted = 0;
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp);
        KafkaProducer<String, String> producer = new KafkaProducer<>(txnProducer(
            Strom.unique("ctp")))) {
      producer.initTransactions();
      consumer.subscribe(List.of(in));
      long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
      int round = 0;
      while (processed < 100 && System.nanoTime() < deadline) {
        ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
        if (records.isEmpty()) {
          continue;
        }
        producer.beginTransaction();
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (ConsumerRecord<String, String> r : records) {
          int n = Integer.parseInt(r.value());
          producer.send(new ProducerRecord<>(out, r.partition(), r.key(), Integer.toString(n * n)));
          offsets.put(new TopicPartition(r.topic(), r.partition()),
              new OffsetAndMetadata(r.offset() + 1));
        }
        producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
        if (round++ % 3 == 1) {
          // an aborted round: its output must never be read committed, and its input is
          // processed again from the last committed offsets. Flushed first, so the aborted
          // records are in the log (abort drops batches still unsent)
          producer.flush();
          producer.abortTransaction();
          aborted += records.count();
          for (TopicPartition tp : records.partitions()) {
            OffsetAndMetadata committed = consumer.committed(Set.of(tp)).get(tp);
            consumer.seek(tp, committed == null ? 0 : committed.offset());
          }
          continue;
        }
        producer.commitTransaction();
        processed += records.count();
      }
    }
    assertEquals(100, processed);
    assertTrue(aborted > 0, "some rounds were aborted");
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(reader("read_committed"))) {
      List<ConsumerRecord<String, String>> committed =
          Strom.readAll(c, Strom.partitions(out, 2), Duration.ofSeconds(30));
      List<Integer> squares = committed.stream().map(r -> Integer.parseInt(r.value())).sorted()
          .collect(Collectors.toList());
      List<Integer> expected = new ArrayList<>();
      for (int i = 0; i < 100; i++) {
        expected.add(i * i);
      }
      expected.sort(null);
      assertEquals(expected, squares, "read_committed sees each output exactly once");
    }
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(reader("read_uncommitted"))) {
      List<ConsumerRecord<String, String>> all =
          Strom.readAll(c, Strom.partitions(out, 2), Duration.ofSeconds(30));
      assertEquals(100 + aborted, all.size(), "read_uncommitted also sees the aborted output");
    }
    try (Admin admin = Strom.admin()) {
      Map<TopicPartition, OffsetAndMetadata> offsets =
          admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
      assertEquals(50L, offsets.get(new TopicPartition(in, 0)).offset());
      assertEquals(50L, offsets.get(new TopicPartition(in, 1)).offset());
    }
  }

  @Test
  void openTransactionHoldsBackReadCommittedAndZombieIsFenced() throws Exception {
    String topic = Strom.createTopic(Strom.unique("txn-lso"), 1);
    String txnId = Strom.unique("zombie");
    try (KafkaProducer<String, String> plain = new KafkaProducer<>(Strom.producerProps());
        KafkaProducer<String, String> first = new KafkaProducer<>(txnProducer(txnId))) {
      plain.send(new ProducerRecord<>(topic, 0, "k", "before")).get();
      first.initTransactions();
      first.beginTransaction();
      first.send(new ProducerRecord<>(topic, 0, "k", "open")).get();
      plain.send(new ProducerRecord<>(topic, 0, "k", "after")).get();
      try (KafkaConsumer<String, String> c = new KafkaConsumer<>(reader("read_committed"))) {
        TopicPartition tp = new TopicPartition(topic, 0);
        assertEquals(1L, c.endOffsets(List.of(tp)).get(tp), "LSO stops at the open txn");
        List<ConsumerRecord<String, String>> seen =
            Strom.readAll(c, List.of(tp), Duration.ofSeconds(10));
        assertEquals(List.of("before"), seen.stream().map(ConsumerRecord::value).toList());
      }
      // a second producer with the same transactional.id fences the first and aborts its
      // transaction: "open" never becomes visible, "after" does
      try (KafkaProducer<String, String> second = new KafkaProducer<>(txnProducer(txnId))) {
        second.initTransactions();
        second.beginTransaction();
        second.send(new ProducerRecord<>(topic, 0, "k", "second"));
        second.commitTransaction();
      }
      first.send(new ProducerRecord<>(topic, 0, "k", "zombie"));
      // fenced: ProducerFencedException, or InvalidProducerEpochException from the send
      assertThrows(KafkaException.class, first::commitTransaction);
    } catch (ProducerFencedException fencedAtSend) {
      // the zombie's send itself may already raise it
    }
    try (KafkaConsumer<String, String> c = new KafkaConsumer<>(reader("read_committed"))) {
      List<ConsumerRecord<String, String>> seen =
          Strom.readAll(c, Strom.partitions(topic, 1), Duration.ofSeconds(30));
      assertEquals(List.of("before", "after", "second"),
          seen.stream().map(ConsumerRecord::value).toList());
    }
  }
}
