package klog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyQueryMetadata;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.ReadOnlyWindowStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * Kafka Streams with processing.guarantee=exactly_once_v2: a word count (a repartition
 * topic, a state store with its compacted changelog) run as application instances that
 * the tests start, kill and restart, answering interactive queries on stdin; and a
 * windowed count.
 */
final class StreamsScenarios {
    static final String COUNTS = "counts";
    static final String WINDOWS = "window-counts";

    private StreamsScenarios() {}

    static void register(Map<String, Driver.Scenario> scenarios) {
        scenarios.put("streams_wordcount", StreamsScenarios::wordCount);
        scenarios.put("streams_windowed_count", StreamsScenarios::windowedCount);
    }

    static Properties streamsConfig(JsonNode args) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, Args.text(args, "application_id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, Args.text(args, "bootstrap"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.STATE_DIR_CONFIG, Args.text(args, "state_dir"));
        // Every update goes downstream (no record cache), so the output holds one count
        // per input word and a duplicate would show.
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, "1000");
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix("session.timeout.ms"), "10000");
        props.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), "1000");
        Args.merge(props, args.path("config"));
        return props;
    }

    /** Reports each state change of the instance as an event; a fatal error too. */
    static CountDownLatch watch(KafkaStreams streams, Driver.Channel channel) {
        CountDownLatch running = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            channel.event("state", Map.of("state", now.name(), "before", before.name()));
            if (now == KafkaStreams.State.RUNNING) {
                running.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            channel.event("uncaught", Map.of("error", e.toString()));
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        return running;
    }

    /**
     * One instance of the word count: lines of {@code input} split into words, grouped by
     * word (through a repartition topic), counted in store "counts" (its changelog topic),
     * each new count to {@code output}. Then it serves commands from stdin, one JSON line
     * each: {"cmd": "query"} answers the "query" event with this instance's local counts
     * and the instance Streams names as the active host of each of them
     * (queryMetadataForKey; application.server is {@code server}); {"cmd": "stop"} closes
     * the instance and ends the run.
     */
    private static Object wordCount(JsonNode args, Driver.Channel channel) throws Exception {
        Properties props = streamsConfig(args);
        props.put(StreamsConfig.APPLICATION_SERVER_CONFIG, Args.text(args, "server"));
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(Args.text(args, "input"), Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(COUNTS))
                .toStream()
                .to(Args.text(args, "output"), Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch running = watch(streams, channel);
        streams.start();
        if (!running.await(60, TimeUnit.SECONDS)) {
            throw new AssertionError("the instance did not reach RUNNING in 60 s: " + streams.state());
        }
        try {
            String line;
            while ((line = channel.readLine()) != null) {
                JsonNode command = Driver.JSON.readTree(line);
                String cmd = command.path("cmd").asText();
                if (cmd.equals("stop")) {
                    break;
                } else if (cmd.equals("query")) {
                    channel.event("query", queryCounts(streams));
                }
            }
        } finally {
            streams.close(Duration.ofSeconds(30));
        }
        return Map.of("state", streams.state().name());
    }

    private static Map<String, Object> queryCounts(KafkaStreams streams) {
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, Long> counts = new TreeMap<>();
        Map<String, String> hosts = new TreeMap<>();
        try {
            ReadOnlyKeyValueStore<String, Long> store = streams.store(StoreQueryParameters
                    .fromNameAndType(COUNTS, QueryableStoreTypes.<String, Long>keyValueStore()));
            try (KeyValueIterator<String, Long> all = store.all()) {
                while (all.hasNext()) {
                    KeyValue<String, Long> kv = all.next();
                    counts.put(kv.key, kv.value);
                    KeyQueryMetadata where = streams.queryMetadataForKey(COUNTS, kv.key,
                            Serdes.String().serializer());
                    hosts.put(kv.key, where.activeHost().host() + ":" + where.activeHost().port());
                }
            }
            out.put("counts", counts);
            out.put("active_hosts", hosts);
        } catch (Exception e) {
            out.put("error", e.toString());
        }
        out.put("state", streams.state().name());
        return out;
    }

    /**
     * A windowed count: records of {@code input} (keys, timestamps set by the producer)
     * counted per key in tumbling windows of {@code window_ms}, to {@code output} as
     * "key@windowStart" -> count. Runs until the window store (queried interactively)
     * holds {@code expect} records in all, then answers its contents.
     */
    private static Object windowedCount(JsonNode args, Driver.Channel channel) throws Exception {
        Properties props = streamsConfig(args);
        long windowMs = args.path("window_ms").asLong(10000);
        int expect = args.path("expect").asInt();
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(Args.text(args, "input"), Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                // An hour's grace and retention: every window the test writes stays open
                // and queryable, whatever order its records come in.
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(windowMs),
                        Duration.ofHours(1)))
                .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as(WINDOWS)
                        .withRetention(Duration.ofHours(2)))
                .toStream()
                .map((Windowed<String> w, Long count) -> KeyValue.pair(
                        w.key() + "@" + w.window().start(), count))
                .to(Args.text(args, "output"), Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch running = watch(streams, channel);
        streams.start();
        try {
            if (!running.await(60, TimeUnit.SECONDS)) {
                throw new AssertionError("not RUNNING in 60 s: " + streams.state());
            }
            long deadline = System.currentTimeMillis() + 60000;
            while (true) {
                Map<String, Long> windows = new TreeMap<>();
                long total = 0;
                try {
                    ReadOnlyWindowStore<String, Long> store = streams.store(StoreQueryParameters
                            .fromNameAndType(WINDOWS, QueryableStoreTypes.<String, Long>windowStore()));
                    try (KeyValueIterator<Windowed<String>, Long> all = store.all()) {
                        while (all.hasNext()) {
                            KeyValue<Windowed<String>, Long> kv = all.next();
                            windows.put(kv.key.key() + "@" + kv.key.window().start(), kv.value);
                            total += kv.value;
                        }
                    }
                } catch (org.apache.kafka.streams.errors.InvalidStateStoreException e) {
                    // Not queryable while (re)balancing: ask again.
                }
                if (total >= expect) {
                    Map<String, Object> out = new LinkedHashMap<>();
                    out.put("windows", windows);
                    out.put("total", total);
                    return out;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new AssertionError("the window store holds " + total + " of " + expect
                            + " records: " + windows);
                }
                Thread.sleep(200);
            }
        } finally {
            streams.close(Duration.ofSeconds(30));
        }
    }
}
