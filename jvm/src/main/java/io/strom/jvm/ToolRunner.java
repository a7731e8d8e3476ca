package io.strom.jvm;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.utils.internals.Exit;

/**
 * Runs several of Kafka's command-line tools, one after the other, in this one JVM (a JVM per
 * tool would cost seconds each), capturing what each prints and its exit code.
 *
 * <p>Usage: {@code ToolRunner steps.tsv results.txt}. Each line of {@code steps.tsv} is one
 * tool run: tab-separated, the tool's script name ({@code kafka-topics}, ...) then its
 * arguments; an argument {@code <FILE} gives the tool {@code FILE} as its standard input.
 * Each run's result goes to {@code results.txt} as
 * <pre>
 * ### STEP n exit=CODE
 * (standard output)
 * ### STDERR
 * (standard error)
 * </pre>
 * A tool's {@code Exit.exit(code)} (how Kafka's tools end) is caught, so the next step runs.
 */
public final class ToolRunner {
  private ToolRunner() {}

  /** The main classes behind Kafka 4's bin/kafka-*.sh scripts. */
  static final Map<String, String> TOOLS = Map.ofEntries(
      Map.entry("kafka-topics", "org.apache.kafka.tools.TopicCommand"),
      Map.entry("kafka-configs", "org.apache.kafka.tools.ConfigCommand"),
      Map.entry("kafka-console-producer", "org.apache.kafka.tools.ConsoleProducer"),
      Map.entry("kafka-console-consumer", "org.apache.kafka.tools.consumer.ConsoleConsumer"),
      Map.entry("kafka-consumer-groups",
          "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"),
      Map.entry("kafka-transactions", "org.apache.kafka.tools.TransactionsCommand"),
      Map.entry("kafka-get-offsets", "org.apache.kafka.tools.GetOffsetShell"),
      Map.entry("kafka-delete-records", "org.apache.kafka.tools.DeleteRecordsCommand"),
      Map.entry("kafka-leader-election", "org.apache.kafka.tools.LeaderElectionCommand"),
      Map.entry("kafka-reassign-partitions",
          "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"),
      Map.entry("kafka-log-dirs", "org.apache.kafka.tools.LogDirsCommand"),
      Map.entry("kafka-producer-perf-test", "org.apache.kafka.tools.ProducerPerformance"),
      Map.entry("kafka-consumer-perf-test", "org.apache.kafka.tools.ConsumerPerformance"),
      Map.entry("kafka-verifiable-producer", "org.apache.kafka.tools.VerifiableProducer"),
      Map.entry("kafka-verifiable-consumer", "org.apache.kafka.tools.VerifiableConsumer"),
      Map.entry("kafka-broker-api-versions", "org.apache.kafka.tools.BrokerApiVersionsCommand"),
      Map.entry("kafka-cluster", "org.apache.kafka.tools.ClusterTool"),
      Map.entry("kafka-groups", "org.apache.kafka.tools.GroupsCommand"));

  /** Thrown in place of the JVM's exit by a tool's {@code Exit.exit}. */
  private static final class ToolExit extends RuntimeException {
    final int code;

    ToolExit(int code) {
      super("exit " + code, null, false, false);
      this.code = code;
    }
  }

  private static volatile Integer firstExit;

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: ToolRunner steps.tsv results.txt");
      System.exit(2);
    }
    // the first Exit.exit of a step is its exit code: some tools catch the ToolExit thrown
    // from inside and exit again with 1
    Exit.setExitProcedure((code, message) -> {
      if (firstExit == null) {
        firstExit = code;
      }
      throw new ToolExit(code);
    });
    Exit.setHaltProcedure((code, message) -> {
      if (firstExit == null) {
        firstExit = code;
      }
      throw new ToolExit(code);
    });
    PrintStream realOut = System.out;
    PrintStream realErr = System.err;
    InputStream realIn = System.in;
    List<String> lines = Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8);
    try (PrintStream results = new PrintStream(Files.newOutputStream(Path.of(args[1])), true,
        StandardCharsets.UTF_8)) {
      int step = 0;
      for (String line : lines) {
        if (line.isBlank()) {
          continue;
        }
        step++;
        List<String> argv = new ArrayList<>(Arrays.asList(line.split("\t")));
        String tool = argv.remove(0);
        InputStream in = new ByteArrayInputStream(new byte[0]);
        for (int i = 0; i < argv.size(); i++) {
          if (argv.get(i).startsWith("<")) {
            in = new ByteArrayInputStream(Files.readAllBytes(Path.of(argv.remove(i).substring(1))));
            break;
          }
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = 0;
        firstExit = null;
        realErr.println("ToolRunner: step " + step + ": " + tool + " " + String.join(" ", argv));
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        System.setIn(in);
        try {
          Method main = Class.forName(TOOLS.get(tool)).getMethod("main", String[].class);
          main.invoke(null, (Object) argv.toArray(new String[0]));
        } catch (InvocationTargetException e) {
          Throwable cause = e.getCause();
          if (cause instanceof ToolExit) {
            code = ((ToolExit) cause).code;
          } else {
            code = -1;
            cause.printStackTrace(System.err);
          }
        } catch (ToolExit e) {
          code = e.code;
        } finally {
          System.out.flush();
          System.err.flush();
          System.setOut(realOut);
          System.setErr(realErr);
          System.setIn(realIn);
        }
        if (firstExit != null) {
          code = firstExit;
        }
        results.println("### STEP " + step + " exit=" + code);
        results.print(out.toString(StandardCharsets.UTF_8));
        results.println("### STDERR");
        // what a tool printed about the ToolExit it caught is ours, not the tool's
        String errors = err.toString(StandardCharsets.UTF_8)
            .replaceAll("(?m)^exit -?\\d+\\R(" + ToolExit.class.getName().replace("$", "\\$")
                + ": exit -?\\d+\\R)?", "");
        results.print(errors);
      }
    }
    // tools may leave non-daemon threads (a perf test's producer): the run is over
    System.exit(0);
  }
}
