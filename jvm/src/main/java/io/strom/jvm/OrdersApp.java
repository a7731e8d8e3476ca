package io.strom.jvm;

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * A Kafka Streams application, unchanged from what would run on Kafka, that tests/jvm runs
 * against strom with {@code processing.guarantee=exactly_once_v2}.
 *
 * <p>Input: {@code <prefix>orders} (key: order id, value: {@code customer,amount}) and
 * {@code <prefix>customers} (key: customer, value: region). Three sub-topologies:
 * <ul>
 *   <li>totals: orders grouped by customer (a repartition topic) and summed into a
 *       changelog-backed store; every update to {@code <prefix>totals} (customer, running sum);
 *   <li>windowed counts: orders per customer per 10-second event-time window (grace of a day:
 *       none dropped) to {@code <prefix>window-counts} (key {@code customer@windowStartMs});
 *   <li>a stream-table join: orders re-keyed by customer joined with the customers table to
 *       {@code <prefix>enriched} (customer, {@code orderId,region,amount}).
 * </ul>
 * The record cache is off, so every input record gives exactly one update on each output: with
 * exactly-once, the committed output is a known function of the input, whatever crashes.
 *
 * <p>Usage: {@code OrdersApp bootstrap applicationId stateDir prefix}. It prints its state
 * changes ({@code STATE RUNNING tasks=N}) to stdout and closes cleanly on SIGTERM.
 */
public final class OrdersApp {
  private OrdersApp() {}

  public static Topology topology(String prefix) {
    StreamsBuilder builder = new StreamsBuilder();
    KStream<String, String> orders =
        builder.stream(prefix + "orders", Consumed.with(Serdes.String(), Serdes.String()));
    KTable<String, String> customers =
        builder.table(prefix + "customers", Consumed.with(Serdes.String(), Serdes.String()));

    orders
        .groupBy((orderId, v) -> v.split(",")[0], Grouped.with("by-customer", Serdes.String(),
            Serdes.String()))
        .aggregate(() -> 0L, (customer, v, sum) -> sum + Long.parseLong(v.split(",")[1]),
            Materialized.<String, Long, org.apache.kafka.streams.state.KeyValueStore<
                org.apache.kafka.common.utils.Bytes, byte[]>>as("totals-store")
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
        .toStream()
        .mapValues(sum -> Long.toString(sum))
        .to(prefix + "totals", Produced.with(Serdes.String(), Serdes.String()));

    orders
        .groupBy((orderId, v) -> v.split(",")[0], Grouped.with("by-customer-w", Serdes.String(),
            Serdes.String()))
        .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofDays(1)))
        .count(Materialized.as("window-counts-store"))
        .toStream()
        .map((w, count) -> KeyValue.pair(w.key() + "@" + w.window().start(), Long.toString(count)))
        .to(prefix + "window-counts", Produced.with(Serdes.String(), Serdes.String()));

    orders
        .map((orderId, v) -> KeyValue.pair(v.split(",")[0], orderId + "," + v.split(",")[1]))
        .join(customers, (order, region) -> order.split(",")[0] + "," + region + ","
            + order.split(",")[1])
        .to(prefix + "enriched", Produced.with(Serdes.String(), Serdes.String()));
    return builder.build();
  }

  public static Properties config(String bootstrap, String appId, String stateDir) {
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
    // internal topics (repartition, changelogs) take the brokers' default.replication.factor
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, -1);
    // a killed instance is noticed in seconds, not Kafka's 45 s default
    p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
    p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1500);
    p.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), 10000);
    return p;
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println("usage: OrdersApp bootstrap applicationId stateDir topicPrefix");
      System.exit(2);
    }
    KafkaStreams streams = new KafkaStreams(topology(args[3]),
        config(args[0], args[1], args[2]));
    CountDownLatch done = new CountDownLatch(1);
    streams.setStateListener((now, before) -> {
      int tasks = now == KafkaStreams.State.RUNNING
          ? streams.metadataForLocalThreads().stream().mapToInt(t -> t.activeTasks().size()).sum()
          : -1;
      System.out.println("STATE " + now + (tasks >= 0 ? " tasks=" + tasks : ""));
      System.out.flush();
      if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
        done.countDown();
      }
    });
    streams.setUncaughtExceptionHandler(e -> {
      System.out.println("UNCAUGHT " + e);
      e.printStackTrace(System.out);
      System.out.flush();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
          .StreamThreadExceptionResponse.REPLACE_THREAD;
    });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close(Duration.ofSeconds(20));
      done.countDown();
    }));
    streams.start();
    done.await();
  }
}
