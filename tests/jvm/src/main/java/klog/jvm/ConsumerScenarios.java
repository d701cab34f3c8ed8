package klog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Kafka's Java consumer: subscribe and assign, seeks, offsetsForTimes, pause/resume, group
 * rebalances with the cooperative-sticky and range assignors, static membership.
 */
final class ConsumerScenarios {
    private ConsumerScenarios() {}

    static void register(Map<String, Driver.Scenario> scenarios) {
        scenarios.put("consume", ConsumerScenarios::consume);
        scenarios.put("consumer_seeks", ConsumerScenarios::seeks);
        scenarios.put("consumer_pause_resume", ConsumerScenarios::pauseResume);
        scenarios.put("consumer_group_rebalance", ConsumerScenarios::groupRebalance);
        scenarios.put("consumer_static_membership", ConsumerScenarios::staticMembership);
    }

    static KafkaConsumer<byte[], byte[]> consumer(Properties props) {
        props.putIfAbsent("key.deserializer", ByteArrayDeserializer.class.getName());
        props.putIfAbsent("value.deserializer", ByteArrayDeserializer.class.getName());
        props.putIfAbsent("auto.offset.reset", "earliest");
        props.putIfAbsent("enable.auto.commit", "false");
        if (!"consumer".equalsIgnoreCase(String.valueOf(props.get("group.protocol")))) {
            // (KIP-848's protocol takes these from the broker and refuses them here.)
            props.putIfAbsent("session.timeout.ms", "10000");
            props.putIfAbsent("heartbeat.interval.ms", "500");
        }
        return new KafkaConsumer<>(props);
    }

    static List<TopicPartition> partitions(JsonNode args) {
        String topic = Args.text(args, "topic");
        List<TopicPartition> out = new ArrayList<>();
        for (int p : Args.ints(args, "partitions")) {
            out.add(new TopicPartition(topic, p));
        }
        return out.isEmpty() ? List.of(new TopicPartition(topic, 0)) : out;
    }

    static void pollUntil(KafkaConsumer<byte[], byte[]> consumer, BooleanSupplier done,
                          long timeoutMs, String what,
                          java.util.function.Consumer<ConsumerRecords<byte[], byte[]>> sink) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!done.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new AssertionError("timed out after " + timeoutMs + " ms waiting for " + what);
            }
            sink.accept(consumer.poll(Duration.ofMillis(100)));
        }
    }

    /**
     * Reads until {@code expect} records have come (or {@code timeout_ms} passed): by
     * subscription (mode "subscribe", the default; commits when a group is set) or by
     * assignment (mode "assign", {@code partitions}). Answers the records read.
     */
    private static Object consume(JsonNode args, Driver.Channel channel) {
        int expect = args.path("expect").asInt();
        long timeoutMs = args.path("timeout_ms").asLong(20000);
        List<Map<String, Object>> records = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(Args.client(args))) {
            if (args.path("mode").asText("subscribe").equals("assign")) {
                consumer.assign(partitions(args));
            } else {
                consumer.subscribe(List.of(Args.text(args, "topic")));
            }
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (records.size() < expect && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    records.add(Records.json(r));
                }
            }
            if (args.path("config").has("group.id")) {
                consumer.commitSync();
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("records", records);
        return out;
    }

    /**
     * On one assigned partition holding records: beginningOffsets/endOffsets,
     * seekToBeginning, seek to {@code seek_to}, seekToEnd, and offsetsForTimes for each of
     * {@code times}; answers what each reported.
     */
    private static Object seeks(JsonNode args, Driver.Channel channel) {
        TopicPartition tp = partitions(args).get(0);
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(Args.client(args))) {
            consumer.assign(List.of(tp));
            out.put("beginning", consumer.beginningOffsets(List.of(tp)).get(tp));
            out.put("end", consumer.endOffsets(List.of(tp)).get(tp));
            consumer.seekToBeginning(List.of(tp));
            out.put("position_after_seek_to_beginning", consumer.position(tp));
            out.put("first_after_seek_to_beginning", firstOffset(consumer));
            consumer.seek(tp, args.path("seek_to").asLong());
            out.put("first_after_seek", firstOffset(consumer));
            consumer.seekToEnd(List.of(tp));
            out.put("position_after_seek_to_end", consumer.position(tp));
            List<Object> found = new ArrayList<>();
            for (JsonNode t : args.path("times")) {
                OffsetAndTimestamp at = consumer.offsetsForTimes(Map.of(tp, t.asLong())).get(tp);
                found.add(at == null ? null : List.of(at.offset(), at.timestamp()));
            }
            out.put("offsets_for_times", found);
        }
        return out;
    }

    private static long firstOffset(KafkaConsumer<byte[], byte[]> consumer) {
        long deadline = System.currentTimeMillis() + 15000;
        while (System.currentTimeMillis() < deadline) {
            ConsumerRecords<byte[], byte[]> got = consumer.poll(Duration.ofMillis(200));
            if (!got.isEmpty()) {
                return got.iterator().next().offset();
            }
        }
        throw new AssertionError("no record within 15 s");
    }

    /**
     * Two assigned partitions, the first paused: polls for {@code pause_ms} and counts what
     * came from each, then resumes and reads the rest.
     */
    private static Object pauseResume(JsonNode args, Driver.Channel channel) {
        List<TopicPartition> tps = partitions(args);
        TopicPartition paused = tps.get(0);
        int expect = args.path("expect").asInt();
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(Args.client(args))) {
            consumer.assign(tps);
            consumer.pause(List.of(paused));
            out.put("paused", consumer.paused().stream().map(TopicPartition::toString).toList());
            Map<Integer, Integer> whilePaused = new HashMap<>();
            long until = System.currentTimeMillis() + args.path("pause_ms").asLong(2000);
            while (System.currentTimeMillis() < until) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    whilePaused.merge(r.partition(), 1, Integer::sum);
                }
            }
            out.put("while_paused", whilePaused);
            consumer.resume(List.of(paused));
            out.put("paused_after_resume", consumer.paused().size());
            Map<Integer, Integer> afterResume = new HashMap<>();
            int total = whilePaused.values().stream().mapToInt(Integer::intValue).sum();
            long deadline = System.currentTimeMillis() + 15000;
            while (total < expect && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    afterResume.merge(r.partition(), 1, Integer::sum);
                    total++;
                }
            }
            out.put("after_resume", afterResume);
        }
        return out;
    }

    /** Every call of a member's rebalance listener, in order: ["assigned"|"revoked"|"lost", [p...]]. */
    private static final class Listener implements ConsumerRebalanceListener {
        final List<List<Object>> calls = new ArrayList<>();
        KafkaConsumer<byte[], byte[]> consumer;

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            calls.add(List.of("revoked", numbers(partitions)));
            if (consumer != null && !partitions.isEmpty()) {
                consumer.commitSync();
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            calls.add(List.of("assigned", numbers(partitions)));
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            calls.add(List.of("lost", numbers(partitions)));
        }
    }

    static List<Integer> numbers(Collection<TopicPartition> partitions) {
        TreeSet<Integer> out = new TreeSet<>();
        partitions.forEach(tp -> out.add(tp.partition()));
        return new ArrayList<>(out);
    }

    /**
     * Two members of one group with {@code assignor} (partition.assignment.strategy): the
     * first alone, then both, polled in turn and committing after each poll, until every
     * partition is owned by exactly one of them and all {@code expect} records were read.
     * Answers each member's listener calls, final assignments and the records read.
     */
    private static Object groupRebalance(JsonNode args, Driver.Channel channel) {
        String topic = Args.text(args, "topic");
        int partitionCount = args.path("partition_count").asInt();
        int expect = args.path("expect").asInt();
        Properties props = Args.client(args);
        props.put("partition.assignment.strategy", Args.text(args, "assignor"));
        List<KafkaConsumer<byte[], byte[]>> members = new ArrayList<>();
        List<Listener> listeners = new ArrayList<>();
        Map<String, Integer> seen = new HashMap<>();
        int[] read = new int[2];
        try {
            for (int m = 0; m < 2; m++) {
                members.add(consumer((Properties) props.clone()));
                listeners.add(new Listener());
                listeners.get(m).consumer = members.get(m);
            }
            java.util.function.IntConsumer pollOne = m -> {
                for (ConsumerRecord<byte[], byte[]> r : members.get(m).poll(Duration.ofMillis(100))) {
                    seen.merge(r.partition() + "@" + r.offset(), 1, Integer::sum);
                    read[m]++;
                }
                if (!members.get(m).assignment().isEmpty()) {
                    try {
                        members.get(m).commitSync();
                    } catch (RebalanceInProgressException e) {
                        // A cooperative member keeps reading while the group rebalances;
                        // its commit waits for the next poll, as Kafka's javadoc says.
                    }
                }
            };
            members.get(0).subscribe(List.of(topic), listeners.get(0));
            long deadline = System.currentTimeMillis() + 30000;
            while (members.get(0).assignment().size() < partitionCount || read[0] == 0) {
                if (System.currentTimeMillis() > deadline) {
                    throw new AssertionError("the first member never owned every partition");
                }
                pollOne.accept(0);
            }
            members.get(1).subscribe(List.of(topic), listeners.get(1));
            deadline = System.currentTimeMillis() + 45000;
            while (true) {
                Set<TopicPartition> a = members.get(0).assignment();
                Set<TopicPartition> b = members.get(1).assignment();
                Set<TopicPartition> both = new HashSet<>(a);
                both.retainAll(b);
                boolean balanced = !a.isEmpty() && !b.isEmpty() && both.isEmpty()
                        && a.size() + b.size() == partitionCount;
                if (balanced && seen.size() >= expect) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new AssertionError("no balanced assignment with every record read: "
                            + a + " / " + b + ", read " + seen.size() + " of " + expect);
                }
                pollOne.accept(0);
                pollOne.accept(1);
            }
            Map<String, Object> out = new LinkedHashMap<>();
            List<Object> finals = new ArrayList<>();
            List<Object> calls = new ArrayList<>();
            for (int m = 0; m < 2; m++) {
                finals.add(numbers(members.get(m).assignment()));
                calls.add(new ArrayList<>(listeners.get(m).calls));
            }
            out.put("assignments", finals);
            out.put("listener_calls", calls);
            out.put("distinct_read", seen.size());
            out.put("read_twice", seen.values().stream().filter(n -> n > 1).count());
            return out;
        } finally {
            for (KafkaConsumer<byte[], byte[]> c : members) {
                c.close(Duration.ofSeconds(5));
            }
        }
    }

    /**
     * Static membership (group.instance.id): two static members join; the first closes (a
     * static member leaves no LeaveGroup behind) and a new consumer with its instance id
     * takes its place. Answers the generations and assignments seen, and what
     * describeConsumerGroups says of the members.
     */
    private static Object staticMembership(JsonNode args, Driver.Channel channel) throws Exception {
        String topic = Args.text(args, "topic");
        String group = Args.text(args, "group");
        int partitionCount = args.path("partition_count").asInt();
        Properties base = Args.client(args);
        base.put("group.id", group);
        base.put("session.timeout.ms", "30000");
        Map<String, Object> out = new LinkedHashMap<>();
        KafkaConsumer<byte[], byte[]> first = staticMember(base, "static-a");
        KafkaConsumer<byte[], byte[]> second = staticMember(base, "static-b");
        try {
            first.subscribe(List.of(topic));
            second.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30000;
            while (first.assignment().size() + second.assignment().size() < partitionCount
                    || first.assignment().isEmpty() || second.assignment().isEmpty()
                    || first.groupMetadata().generationId() != second.groupMetadata().generationId()) {
                if (System.currentTimeMillis() > deadline) {
                    throw new AssertionError("the two static members never shared the partitions");
                }
                first.poll(Duration.ofMillis(100));
                second.poll(Duration.ofMillis(100));
            }
            out.put("generation_before", first.groupMetadata().generationId());
            out.put("first_assignment", numbers(first.assignment()));
            out.put("first_member_id", first.groupMetadata().memberId());
            try (Admin admin = Admin.create(Args.client(args))) {
                out.put("members_before", members(admin, group));
            }
            first.close(Duration.ofSeconds(5));
            first = staticMember(base, "static-a");
            first.subscribe(List.of(topic));
            deadline = System.currentTimeMillis() + 20000;
            while (first.assignment().isEmpty()) {
                if (System.currentTimeMillis() > deadline) {
                    throw new AssertionError("the returning static member got no partitions");
                }
                first.poll(Duration.ofMillis(100));
                second.poll(Duration.ofMillis(100));
            }
            // A few more polls of both: a rebalance would show as a new generation.
            for (int i = 0; i < 10; i++) {
                first.poll(Duration.ofMillis(100));
                second.poll(Duration.ofMillis(100));
            }
            out.put("generation_after", first.groupMetadata().generationId());
            out.put("second_generation_after", second.groupMetadata().generationId());
            out.put("rejoined_assignment", numbers(first.assignment()));
            out.put("rejoined_member_id", first.groupMetadata().memberId());
            try (Admin admin = Admin.create(Args.client(args))) {
                out.put("members_after", members(admin, group));
            }
            return out;
        } finally {
            first.close(Duration.ofSeconds(5));
            second.close(Duration.ofSeconds(5));
        }
    }

    private static KafkaConsumer<byte[], byte[]> staticMember(Properties base, String instance) {
        Properties props = (Properties) base.clone();
        props.put("group.instance.id", instance);
        return consumer(props);
    }

    static List<Map<String, Object>> members(Admin admin, String group) throws Exception {
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group).get();
        List<Map<String, Object>> out = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            Map<String, Object> member = new LinkedHashMap<>();
            member.put("member_id", m.consumerId());
            member.put("group_instance_id", m.groupInstanceId().orElse(null));
            member.put("client_id", m.clientId());
            member.put("partitions", numbers(m.assignment().topicPartitions()));
            out.add(member);
        }
        out.sort((x, y) -> String.valueOf(x.get("group_instance_id"))
                .compareTo(String.valueOf(y.get("group_instance_id"))));
        return out;
    }
}
