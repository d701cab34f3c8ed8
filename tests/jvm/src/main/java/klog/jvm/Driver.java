package klog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.TreeMap;

/**
 * The one entry point of klog's JVM peers: it runs named scenarios, each one thing users do
 * with Kafka's Java client, Streams or tools, and answers each with one JSON line.
 *
 * <p>{@code serve}: one scenario per line of stdin, {@code {"scenario": NAME, "args": {...}}},
 * each answered on stdout by {@code {"ok": true, "result": ...}} or {@code {"ok": false,
 * "error": ..., "trace": ...}}; the JVM stays up for the next one, so a test module pays for
 * one JVM start on this small machine. {@code run NAME ARGS}: one scenario in a JVM of its
 * own (a process a test may kill -9), which may also talk on stdin/stdout while it runs
 * (see {@link Channel}).
 *
 * <p>stdout belongs to the protocol alone: System.out is sent to stderr, where Kafka's log
 * goes too (the tests keep it in a file and show its tail on failure).
 */
public final class Driver {
    static final ObjectMapper JSON = new ObjectMapper();

    private static final Map<String, Scenario> SCENARIOS = new TreeMap<>();

    /**
     * The scenario classes, each with a static register(Map); those missing from a build
     * are left out (the Kafka 3.x build has the client's scenarios only; see pom.xml).
     */
    private static final String[] GROUPS = {"ProducerScenarios", "ConsumerScenarios",
        "TransactionScenarios", "AdminScenarios", "StreamsScenarios", "ToolScenarios"};

    static {
        for (String group : GROUPS) {
            try {
                Class.forName("klog.jvm." + group)
                        .getDeclaredMethod("register", Map.class).invoke(null, SCENARIOS);
            } catch (ClassNotFoundException e) {
                // not in this build
            } catch (ReflectiveOperationException e) {
                throw new ExceptionInInitializerError(e);
            }
        }
    }

    private Driver() {}

    public static void main(String[] argv) throws Exception {
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
        PrintStream protocol = new PrintStream(
                new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Channel channel = new Channel(protocol, in);
        if (argv.length >= 1 && argv[0].equals("serve")) {
            serve(channel);
        } else if (argv.length >= 2 && argv[0].equals("run")) {
            JsonNode args = JSON.readTree(argv.length > 2 ? argv[2] : "{}");
            ObjectNode answer = answer(argv[1], args, channel);
            channel.send(answer);
            System.err.flush();
            // Kafka's non-daemon threads (Streams, Connect) must not keep a finished run alive.
            Runtime.getRuntime().halt(answer.get("ok").asBoolean() ? 0 : 1);
        } else {
            System.err.println("usage: Driver serve | Driver run SCENARIO [ARGS-JSON]");
            System.err.println("scenarios: " + SCENARIOS.keySet());
            Runtime.getRuntime().halt(2);
        }
    }

    private static void serve(Channel channel) throws Exception {
        String line;
        while ((line = channel.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode request = JSON.readTree(line);
            channel.send(answer(request.path("scenario").asText(), request.path("args"), channel));
        }
        System.err.flush();
        Runtime.getRuntime().halt(0);
    }

    private static ObjectNode answer(String name, JsonNode args, Channel channel) {
        ObjectNode answer = JSON.createObjectNode();
        Scenario scenario = SCENARIOS.get(name);
        if (scenario == null) {
            answer.put("ok", false);
            answer.put("error", "no scenario " + name + "; known: " + SCENARIOS.keySet());
            return answer;
        }
        System.err.println("[driver] scenario " + name + " " + args);
        try {
            Object result = scenario.run(args, channel);
            answer.put("ok", true);
            answer.set("result", JSON.valueToTree(result));
        } catch (Throwable e) {
            StringWriter trace = new StringWriter();
            e.printStackTrace(new PrintWriter(trace));
            System.err.println("[driver] scenario " + name + " failed: " + trace);
            answer.put("ok", false);
            answer.put("error", e.toString());
            answer.put("trace", trace.toString());
        }
        System.err.println("[driver] scenario " + name + " done");
        return answer;
    }

    /** A scenario: JSON arguments in, a value Jackson can write out. */
    @FunctionalInterface
    interface Scenario {
        Object run(JsonNode args, Channel channel) throws Exception;
    }

    /** The protocol's two streams; a scenario that runs a while reports events through it. */
    static final class Channel {
        private final PrintStream out;
        private final BufferedReader in;

        Channel(PrintStream out, BufferedReader in) {
            this.out = out;
            this.in = in;
        }

        synchronized void send(Object message) {
            try {
                out.println(JSON.writeValueAsString(message));
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }

        /** An event line of a running scenario: {"event": NAME, ...}. */
        void event(String name, Map<String, ?> fields) {
            Map<String, Object> message = new TreeMap<>(fields);
            message.put("event", name);
            send(message);
        }

        String readLine() throws java.io.IOException {
            return in.readLine();
        }
    }
}
