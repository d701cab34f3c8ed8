package klog.jvm;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * The records the scenarios write, made from their index so the pytest side can rebuild
 * them and check what another client read, and the JSON form of a record read.
 */
final class Records {
    private Records() {}

    static String key(String prefix, int i) {
        return prefix + i;
    }

    /** "value-I-" repeated to {@code size} bytes (at least the first repetition). */
    static byte[] value(int i, int size) {
        byte[] unit = ("value-" + i + "-").getBytes(StandardCharsets.US_ASCII);
        int length = Math.max(size, unit.length);
        byte[] out = new byte[length];
        for (int p = 0; p < length; p++) {
            out[p] = unit[p % unit.length];
        }
        return out;
    }

    static long crc(byte[] bytes) {
        CRC32 crc = new CRC32();
        crc.update(bytes);
        return crc.getValue();
    }

    /**
     * A record read: partition, offset, timestamp, key, the value (as text up to 200 bytes,
     * else its size and CRC32) and headers as [key, value] pairs.
     */
    static Map<String, Object> json(ConsumerRecord<byte[], byte[]> r) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("topic", r.topic());
        out.put("partition", r.partition());
        out.put("offset", r.offset());
        out.put("timestamp", r.timestamp());
        out.put("timestamp_type", r.timestampType().name);
        out.put("key", r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8));
        byte[] value = r.value();
        if (value == null) {
            out.put("value", null);
        } else if (value.length <= 200) {
            out.put("value", new String(value, StandardCharsets.UTF_8));
        } else {
            out.put("value_size", value.length);
            out.put("value_crc", crc(value));
        }
        List<List<String>> headers = new ArrayList<>();
        for (Header h : r.headers()) {
            headers.add(List.of(h.key(),
                    h.value() == null ? "" : new String(h.value(), StandardCharsets.UTF_8)));
        }
        out.put("headers", headers);
        out.put("leader_epoch", r.leaderEpoch().orElse(-1));
        return out;
    }
}
