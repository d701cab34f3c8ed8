package klog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** Kafka's Java producer: acks, idempotence, codecs, headers, large records. */
final class ProducerScenarios {
    private ProducerScenarios() {}

    static void register(Map<String, Driver.Scenario> scenarios) {
        scenarios.put("produce", ProducerScenarios::produce);
        scenarios.put("produce_refused", ProducerScenarios::produceRefused);
    }

    static KafkaProducer<byte[], byte[]> producer(Properties props) {
        props.putIfAbsent("key.serializer", ByteArraySerializer.class.getName());
        props.putIfAbsent("value.serializer", ByteArraySerializer.class.getName());
        props.putIfAbsent("delivery.timeout.ms", "30000");
        props.putIfAbsent("request.timeout.ms", "15000");
        return new KafkaProducer<>(props);
    }

    static ProducerRecord<byte[], byte[]> record(JsonNode args, String topic, int i) {
        int size = args.path("value_size").asInt(20);
        Integer partition = args.has("partition") ? args.get("partition").asInt() : null;
        Long timestamp = args.has("timestamp") ? args.get("timestamp").asLong() + i : null;
        int keys = args.path("key_modulo").asInt(0);
        byte[] key = Records.key(args.path("key_prefix").asText("k"), keys > 0 ? i % keys : i)
                .getBytes(StandardCharsets.UTF_8);
        int tombstones = args.path("tombstone_every").asInt(0);
        byte[] value = tombstones > 0 && i % tombstones == tombstones - 1 ? null
                : Records.value(i, size);
        ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(
                topic, partition, timestamp, key, value);
        if (args.path("headers").asBoolean(false)) {
            record.headers().add(new RecordHeader("index", Integer.toString(i)
                    .getBytes(StandardCharsets.UTF_8)));
            record.headers().add(new RecordHeader("client", "java"
                    .getBytes(StandardCharsets.UTF_8)));
            record.headers().add(new RecordHeader("empty", new byte[0]));
        }
        return record;
    }

    /**
     * {@code count} records (key prefix + index, or index modulo {@code key_modulo}; value of
     * {@code value_size} bytes, or none for every {@code tombstone_every}-th; optional
     * headers, partition, timestamps) sent with the producer {@code config}, then flushed;
     * answers each record's partition and offset as the broker acknowledged it.
     */
    private static Object produce(JsonNode args, Driver.Channel channel) throws Exception {
        String topic = Args.text(args, "topic");
        int count = args.path("count").asInt(100);
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(Args.client(args))) {
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(record(args, topic, i)));
            }
            producer.flush();
            List<List<Long>> offsets = new ArrayList<>();
            for (Future<RecordMetadata> future : sent) {
                RecordMetadata m = future.get(30, TimeUnit.SECONDS);
                offsets.add(List.of((long) m.partition(), m.offset(), m.timestamp()));
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("offsets", offsets);
            return out;
        }
    }

    /**
     * One record the broker must refuse: answers the exception the send's future failed
     * with (class and message), or fails when the broker took it.
     */
    private static Object produceRefused(JsonNode args, Driver.Channel channel) throws Exception {
        String topic = Args.text(args, "topic");
        try (KafkaProducer<byte[], byte[]> producer = producer(Args.client(args))) {
            try {
                RecordMetadata m = producer.send(record(args, topic, 0)).get(30, TimeUnit.SECONDS);
                throw new AssertionError("the broker took the record at offset " + m.offset());
            } catch (ExecutionException e) {
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("exception", e.getCause().getClass().getName());
                out.put("message", String.valueOf(e.getCause().getMessage()));
                return out;
            }
        }
    }
}
