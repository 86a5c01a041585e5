// Issue 33: a job whose only state is its source's splits, snapshotted mid-run, for the split decoder.
//
// env.fromSequence(0, N - 1) (Flink's NumberSequenceSource) at parallelism 2: two splits, one per reader.
// A map chained to each reader records, in its snapshotState, the last number it passed on; chained to
// the source, it snapshots at the same point of the stream as the reader, so the reader's split then
// starts right after that number (or where the split started, if nothing passed yet). The split's end
// and id are not visible to the job and are not asserted. A 2 ms pause per number keeps the job running
// while a canonical savepoint is taken; EXPECTED.json holds, per reader subtask, the job's own figures.
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

public class SourceSplits {
    static final long N = 100_000L;
    /** checkpoint id -> subtask -> {first number seen, last number seen} at that checkpoint */
    static final Map<Long, Map<Integer, long[]>> SEEN = new ConcurrentHashMap<>();
    static final Map<Integer, Long> FIRST = new ConcurrentHashMap<>();

    public static class Track extends RichMapFunction<Long, Long> implements CheckpointedFunction {
        long first = -1, last = -1;

        @Override
        public Long map(Long v) throws Exception {
            if (first < 0) { first = v; FIRST.put(getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), v); }
            last = v;
            Thread.sleep(2);
            return v;
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) {
            SEEN.computeIfAbsent(ctx.getCheckpointId(), k -> new ConcurrentHashMap<>())
                    .put(getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), new long[] {first, last});
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) {}
    }

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        Path dest = Paths.get(args[0]).resolve(args[1]);
        Path work = Files.createTempDirectory("flink-fixture-splits");
        Map<String, String> conf = new HashMap<>();
        conf.put("state.backend.type", "hashmap");
        conf.put("execution.checkpointing.savepoint-dir", work.resolve("savepoints").toUri().toString());
        conf.put("rest.bind-port", "0");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        env.setParallelism(2);
        env.setMaxParallelism(128);
        env.fromSequence(0, N - 1).uid("sequence").name("sequence")
                .map(new Track()).uid("track").name("track")
                .sinkTo(new DiscardingSink<>()).uid("sink").name("sink");
        JobClient client = env.executeAsync("fixture-source-splits");
        while (FIRST.size() < 2) Thread.sleep(20);  // both readers got their split and passed numbers on
        Thread.sleep(500);
        String sp = client.triggerSavepoint(work.resolve("savepoints").toUri().toString(), SavepointFormatType.CANONICAL).get();
        client.cancel().get();
        SourceSplits.deleteTree(dest);
        Files.createDirectories(dest.getParent());
        Files.move(Paths.get(new java.net.URI(sp)), dest, StandardCopyOption.ATOMIC_MOVE);
        // the savepoint is the only checkpoint of this job
        if (SEEN.size() != 1) throw new IllegalStateException("expected one snapshot, got " + SEEN.keySet());
        Map<Integer, long[]> seen = SEEN.values().iterator().next();
        StringBuilder js = new StringBuilder();
        js.append("{\n \"generator\": \"tools/flink/src/SourceSplits.java\",\n \"flink_version\": \"")
          .append(org.apache.flink.runtime.util.EnvironmentInformation.getVersion())
          .append("\",\n \"name\": \"").append(args[1]).append("\", \"job\": \"source-splits\", \"backend\": \"hashmap\",")
          .append(" \"kind\": \"canonical-savepoint\", \"parallelism\": 2, \"numbers\": ").append(N).append(",\n")
          .append(" \"source\": {\"operator\": \"sequence\", \"state\": \"SourceReaderState\", \"splits\": [");
        TreeMap<Integer, long[]> bySub = new TreeMap<>(seen);
        String sep = "";
        for (Map.Entry<Integer, long[]> e : bySub.entrySet()) {
            long[] fl = e.getValue();
            // the reader's split resumes after the last number its chained map passed on
            js.append(sep).append("\n  {\"subtask\": ").append(e.getKey()).append(", \"first_seen\": ").append(fl[0])
              .append(", \"last_seen\": ").append(fl[1]).append(", \"from\": ").append(fl[1] + 1).append("}");
            sep = ",";
        }
        js.append("]}\n}\n");
        Files.writeString(dest.resolve("EXPECTED.json"), js.toString());
        System.out.println("wrote " + dest);
        System.exit(0);
    }

    static void deleteTree(Path p) throws java.io.IOException {
        if (!Files.exists(p)) return;
        try (java.util.stream.Stream<Path> s = Files.walk(p)) {
            s.sorted(java.util.Comparator.reverseOrder()).map(Path::toFile).forEach(java.io.File::delete);
        }
    }
}
