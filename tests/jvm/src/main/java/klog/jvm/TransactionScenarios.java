package klog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;

/**
 * Kafka's Java transactions: the consume-transform-produce loop with
 * sendOffsetsToTransaction (and aborts on the way), a zombie fenced by its successor,
 * aborted and open transactions as read_committed consumers see them.
 */
final class TransactionScenarios {
    private TransactionScenarios() {}

    static void register(Map<String, Driver.Scenario> scenarios) {
        scenarios.put("txn_copy", TransactionScenarios::copy);
        scenarios.put("txn_fencing", TransactionScenarios::fencing);
        scenarios.put("txn_abort_and_lso", TransactionScenarios::abortAndLso);
    }

    static KafkaProducer<byte[], byte[]> transactional(JsonNode args, String id) {
        Properties props = Args.client(args);
        props.put("transactional.id", id);
        props.putIfAbsent("transaction.timeout.ms", "30000");
        props.putIfAbsent("max.block.ms", "30000");
        return ProducerScenarios.producer(props);
    }

    static KafkaConsumer<byte[], byte[]> readCommitted(JsonNode args, String group) {
        Properties props = Args.client(args);
        props.put("isolation.level", "read_committed");
        if (group != null) {
            props.put("group.id", group);
        }
        return ConsumerScenarios.consumer(props);
    }

    /** The copy's output value for an input value: "copied:" + the input. */
    static byte[] transform(byte[] value) {
        return ("copied:" + new String(value, StandardCharsets.UTF_8))
                .getBytes(StandardCharsets.UTF_8);
    }

    /**
     * Copies {@code input} to {@code output} exactly once: poll (read_committed, group
     * {@code group}), begin, send each record transformed to the same partition,
     * sendOffsetsToTransaction, commit. Every {@code abort_every}-th transaction is aborted
     * instead and its records read again. An abortable error (a broker gone) aborts and
     * rewinds to the committed offsets, as Kafka's documentation says; a fatal one ends
     * the run. Stops once the committed offsets reach {@code expect} records; reports
     * progress events ({@code committed}, the transaction coordinator) as it goes.
     */
    private static Object copy(JsonNode args, Driver.Channel channel) throws Exception {
        String input = Args.text(args, "input");
        String output = Args.text(args, "output");
        String group = Args.text(args, "group");
        String id = Args.text(args, "transactional_id");
        int expect = args.path("expect").asInt();
        int abortEvery = args.path("abort_every").asInt(0);
        long pauseMs = args.path("pause_ms").asLong(0);
        int transactions = 0;
        int aborted = 0;
        int abortableErrors = 0;
        long committedRecords = 0;
        List<String> errors = new ArrayList<>();
        Properties consumerProps = Args.client(args);
        consumerProps.put("isolation.level", "read_committed");
        consumerProps.put("group.id", group);
        consumerProps.put("max.poll.records", args.path("max_poll_records").asText("50"));
        try (KafkaConsumer<byte[], byte[]> consumer = ConsumerScenarios.consumer(consumerProps);
             KafkaProducer<byte[], byte[]> producer = transactional(args, id);
             Admin admin = Admin.create(Args.client(args))) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            long deadline = System.currentTimeMillis() + args.path("timeout_ms").asLong(120000);
            while (committedRecords < expect) {
                if (System.currentTimeMillis() > deadline) {
                    throw new AssertionError("copied " + committedRecords + " of " + expect
                            + " in time; errors: " + errors);
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                try {
                    producer.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        producer.send(new ProducerRecord<>(output, r.partition(), r.key(),
                                transform(r.value())));
                        offsets.put(new TopicPartition(r.topic(), r.partition()),
                                new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    transactions++;
                    if (abortEvery > 0 && transactions % abortEvery == 0) {
                        producer.abortTransaction();
                        aborted++;
                        rewind(consumer);
                        continue;
                    }
                    producer.commitTransaction();
                    committedRecords += records.count();
                } catch (ProducerFencedException | InvalidProducerEpochException e) {
                    throw e;
                } catch (KafkaException e) {
                    abortableErrors++;
                    errors.add(e.toString());
                    System.err.println("[txn_copy] aborting after " + e);
                    try {
                        producer.abortTransaction();
                    } catch (KafkaException again) {
                        errors.add("abort: " + again);
                        throw again;
                    }
                    rewind(consumer);
                    continue;
                }
                Map<String, Object> progress = new LinkedHashMap<>();
                progress.put("committed", committedRecords);
                progress.put("transactions", transactions);
                if (transactions == 1 || args.path("report_coordinator").asBoolean()) {
                    try {
                        progress.put("coordinator", admin.describeTransactions(List.of(id))
                                .description(id).get(10, TimeUnit.SECONDS).coordinatorId());
                    } catch (Exception e) {
                        progress.put("coordinator", -1);
                    }
                }
                channel.event("progress", progress);
                if (pauseMs > 0) {
                    Thread.sleep(pauseMs);
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("committed_records", committedRecords);
        out.put("transactions", transactions);
        out.put("aborted", aborted);
        out.put("abortable_errors", abortableErrors);
        out.put("errors", errors);
        return out;
    }

    /** Back to the group's committed offsets (or the start), after an abort. */
    private static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        var assigned = consumer.assignment();
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata at = committed.get(tp);
            if (at == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, at.offset());
            }
        }
    }

    private static String send(KafkaProducer<byte[], byte[]> producer, String topic, String value) {
        try {
            producer.send(new ProducerRecord<>(topic, 0, null,
                    value.getBytes(StandardCharsets.UTF_8))).get(20, TimeUnit.SECONDS);
            return "ok";
        } catch (Exception e) {
            return Args.error(e);
        }
    }

    /**
     * A zombie: producer A (transactional id {@code transactional_id}) has a transaction
     * open when producer B starts with the same id; A's sends and commit must fail as
     * fenced, B's transaction commits. Answers what each step gave.
     */
    private static Object fencing(JsonNode args, Driver.Channel channel) {
        String topic = Args.text(args, "topic");
        String id = Args.text(args, "transactional_id");
        Map<String, Object> out = new LinkedHashMap<>();
        KafkaProducer<byte[], byte[]> zombie = transactional(args, id);
        try (KafkaProducer<byte[], byte[]> successor = transactional(args, id)) {
            zombie.initTransactions();
            zombie.beginTransaction();
            out.put("zombie_first_send", send(zombie, topic, "zombie-1"));
            successor.initTransactions();
            out.put("zombie_second_send", send(zombie, topic, "zombie-2"));
            try {
                zombie.commitTransaction();
                out.put("zombie_commit", "ok");
            } catch (Exception e) {
                out.put("zombie_commit", Args.error(e));
            }
            successor.beginTransaction();
            out.put("successor_send", send(successor, topic, "successor-1"));
            successor.commitTransaction();
            out.put("successor_commit", "ok");
        } finally {
            zombie.close(Duration.ofSeconds(5));
        }
        return out;
    }

    /**
     * An aborted transaction (10 records), a committed one (5), then one left open (3):
     * what a read_committed and a read_uncommitted consumer read, and where
     * read_committed's end offset (the last stable offset) stands while the last is open
     * and after it commits.
     */
    private static Object abortAndLso(JsonNode args, Driver.Channel channel) throws Exception {
        String topic = Args.text(args, "topic");
        TopicPartition tp = new TopicPartition(topic, 0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<byte[], byte[]> producer = transactional(args,
                Args.text(args, "transactional_id"))) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("aborted-" + i).getBytes()));
            }
            producer.flush();
            producer.abortTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 5; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("committed-" + i).getBytes()));
            }
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("open-" + i).getBytes()));
            }
            producer.flush();
            try (KafkaConsumer<byte[], byte[]> committed = readCommitted(args, null);
                 KafkaConsumer<byte[], byte[]> uncommitted = ConsumerScenarios.consumer(
                         Args.client(args))) {
                committed.assign(List.of(tp));
                uncommitted.assign(List.of(tp));
                out.put("lso_while_open", committed.endOffsets(List.of(tp)).get(tp));
                out.put("hw_while_open", uncommitted.endOffsets(List.of(tp)).get(tp));
                out.put("read_committed_while_open", values(committed, 5));
                producer.commitTransaction();
                out.put("lso_after_commit", committed.endOffsets(List.of(tp)).get(tp));
                out.put("read_committed_after_commit", values(committed, 3));
                out.put("read_uncommitted", values(uncommitted, 18));
            }
        }
        return out;
    }

    private static List<String> values(KafkaConsumer<byte[], byte[]> consumer, int expect) {
        List<String> out = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 10000;
        while (out.size() < expect && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                out.add(new String(r.value(), StandardCharsets.UTF_8));
            }
        }
        // Anything beyond what was expected shows too: poll a little longer.
        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(300))) {
            out.add(new String(r.value(), StandardCharsets.UTF_8));
        }
        return out;
    }
}
