package klog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/** Reading a scenario's JSON arguments: client properties, strings, numbers, lists. */
final class Args {
    private Args() {}

    /**
     * Client properties: {@code bootstrap} as bootstrap.servers, then every entry of the
     * {@code config} object (Kafka's property names, values as strings).
     */
    static Properties client(JsonNode args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args.path("bootstrap").asText());
        merge(props, args.path("config"));
        return props;
    }

    /** {@link #client} plus the given defaults where the arguments do not set them. */
    static Properties client(JsonNode args, Map<String, String> defaults) {
        Properties props = new Properties();
        props.putAll(defaults);
        props.putAll(client(args));
        return props;
    }

    static void merge(Properties props, JsonNode config) {
        Iterator<Map.Entry<String, JsonNode>> fields = config.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> field = fields.next();
            props.put(field.getKey(), field.getValue().asText());
        }
    }

    static String text(JsonNode args, String name) {
        JsonNode node = args.get(name);
        if (node == null || node.isNull()) {
            throw new IllegalArgumentException("missing argument " + name);
        }
        return node.asText();
    }

    static List<String> texts(JsonNode args, String name) {
        List<String> out = new ArrayList<>();
        args.path(name).forEach(n -> out.add(n.asText()));
        return out;
    }

    /** The simple class name of an exception, or of the cause an ExecutionException wraps. */
    static String error(Throwable e) {
        Throwable cause = e instanceof java.util.concurrent.ExecutionException
                && e.getCause() != null ? e.getCause() : e;
        return cause.getClass().getSimpleName();
    }

    static List<Integer> ints(JsonNode args, String name) {
        List<Integer> out = new ArrayList<>();
        args.path(name).forEach(n -> out.add(n.asInt()));
        return out;
    }
}
