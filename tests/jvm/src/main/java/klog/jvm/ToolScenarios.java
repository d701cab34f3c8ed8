package klog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.utils.Exit;

/**
 * Kafka's own command-line tools (kafka-tools' org.apache.kafka.tools.* and kafka_2.13's
 * kafka.admin.ConfigCommand and kafka.tools.DumpLogSegments), run in this JVM by their
 * main class as kafka-*.sh would run them: their exit goes through Kafka's Exit, which is
 * turned into an answer here, and what they print to stdout and stderr (Java's System.out
 * and Scala's Console alike) is caught and answered.
 */
final class ToolScenarios {
    private ToolScenarios() {}

    static void register(Map<String, Driver.Scenario> scenarios) {
        scenarios.put("tool", ToolScenarios::tool);
    }

    /** Thrown by Kafka's Exit.exit / Exit.halt while a tool runs. */
    private static final class ToolExit extends RuntimeException {
        final int code;

        ToolExit(int code, String message) {
            super("exit " + code + (message == null ? "" : ": " + message), null, false, false);
            this.code = code;
        }
    }

    /**
     * Runs {@code main} (a class name) with {@code argv}; answers its exit code (0 when its
     * main returned), stdout and stderr.
     */
    private static synchronized Object tool(JsonNode args, Driver.Channel channel) throws Exception {
        String main = Args.text(args, "main");
        List<String> argv = Args.texts(args, "argv");
        Method entry = Class.forName(main).getMethod("main", String[].class);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        PrintStream savedOut = System.out;
        PrintStream savedErr = System.err;
        // The tool's first Exit call is its exit: some tools catch everything around their
        // own Exit.exit (TopicCommand does), so what they print after it (our ToolExit, then
        // another exit) is cut off, and that first code is the answer.
        int[] first = {-1, 0, 0};
        Exit.Procedure exit = (status, message) -> {
            if (first[0] < 0) {
                first[0] = status;
                first[1] = out.size();
                first[2] = err.size();
            }
            throw new ToolExit(status, message);
        };
        Exit.setExitProcedure(exit);
        Exit.setHaltProcedure(exit);
        int returned;
        try (PrintStream toolOut = new PrintStream(out, true, StandardCharsets.UTF_8);
             PrintStream toolErr = new PrintStream(err, true, StandardCharsets.UTF_8)) {
            System.setOut(toolOut);
            System.setErr(toolErr);
            try {
                returned = scala.Console.withOut(toolOut, () -> scala.Console.withErr(toolErr,
                        () -> run(entry, argv)));
            } catch (ToolExit e) {
                returned = e.code;
            }
        } finally {
            System.setOut(savedOut);
            System.setErr(savedErr);
            Exit.resetExitProcedure();
            Exit.resetHaltProcedure();
        }
        String stdout = out.toString(StandardCharsets.UTF_8);
        String stderr = err.toString(StandardCharsets.UTF_8);
        int code = returned;
        if (first[0] >= 0) {
            code = first[0];
            stdout = new String(out.toByteArray(), 0, first[1], StandardCharsets.UTF_8);
            stderr = new String(err.toByteArray(), 0, first[2], StandardCharsets.UTF_8);
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("exit", code);
        result.put("stdout", stdout);
        result.put("stderr", stderr);
        return result;
    }

    private static int run(Method entry, List<String> argv) {
        try {
            entry.invoke(null, (Object) argv.toArray(new String[0]));
            return 0;
        } catch (InvocationTargetException e) {
            if (e.getCause() instanceof ToolExit exit) {
                return exit.code;
            }
            e.getCause().printStackTrace();
            return 99;
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }
}
