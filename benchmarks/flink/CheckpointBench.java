// Apache Flink side of State Explorer's checkpoint benchmark (benchmarks/bench_checkpoints.py).
//
// The same experiment as our engine's: parallelism 1, the embedded RocksDB backend, one keyed
// ValueState<byte[]> of VALUE_BYTES random bytes per key ("user-%010d"), KEYS keys (the state size),
// then ROUNDS rounds in which 1 % of the keys get new random values, each followed by a checkpoint.
// Everything runs on a MiniCluster in this JVM; the source is fed from this class's main thread, and a
// checkpoint is triggered (MiniCluster.triggerCheckpoint) only once the keyed operator has processed
// every record sent, so each checkpoint holds exactly the state described.
//
//   mode "incremental": execution.checkpointing.incremental=true. The first checkpoint uploads every
//       SST file; then per round an INCREMENTAL checkpoint (only the SST files new since the last one),
//       and in the first and the last round after it a FULL one (CheckpointType.FULL: every SST file again).
//   mode "full": execution.checkpointing.incremental=false, Flink's default for RocksDB: every checkpoint
//       iterates the whole database and writes every entry (RocksFullSnapshotStrategy); two rounds.
//
// Per checkpoint: Flink's own statistics (end-to-end duration, state size, checkpointed size = what this
// checkpoint persisted), the wall time of triggerCheckpoint's future, and the bytes that appeared in the
// checkpoint directory (files new since the previous checkpoint). Recovery: a new job restoring the last
// checkpoint of each type; restore time = submit to the keyed operator's open() (RocksDB restored,
// deployment included), beside the same span for a job without state on the same (warm) cluster. A
// probe then reads 1,000 keys back from the restored state and counts the ones found.
//
// Usage: CheckpointBench <incremental|full> <state-MB> <value-bytes> <rounds> <work-dir>
// Prints one line "RESULT {json}".
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.CheckpointType;
import org.apache.flink.runtime.checkpoint.AbstractCheckpointStats;
import org.apache.flink.runtime.checkpoint.CompletedCheckpointStats;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.source.legacy.RichSourceFunction;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.util.Collector;

public class CheckpointBench {

    static final double CHURN = 0.01;
    static final int PROBE_KEYS = 1000;
    // the main thread hands the source batches of key indices; a probe batch reads keys back instead
    static final LinkedBlockingQueue<Batch> QUEUE = new LinkedBlockingQueue<>();
    static final AtomicLong SENT = new AtomicLong();
    static final AtomicLong PROCESSED = new AtomicLong();
    static final AtomicLong FOUND = new AtomicLong();
    static volatile long openedNs;
    static volatile boolean stop;
    static int valueBytes;

    static final class Batch {
        final int[] keys;
        final boolean probe;

        Batch(int[] keys, boolean probe) {
            this.keys = keys;
            this.probe = probe;
        }
    }

    /** One record: a key and its new value (or a probe of the key's state). A Flink POJO. */
    public static class Rec {
        public String key;
        public byte[] value;
        public boolean probe;

        public Rec() {}
    }

    static String key(int i) {
        return String.format(Locale.ROOT, "user-%010d", i);
    }

    /** Emits what the main thread queues; idles (without the checkpoint lock) in between. */
    public static class Feeder extends RichSourceFunction<Rec> {
        private volatile boolean running = true;

        @Override
        public void run(SourceContext<Rec> ctx) throws Exception {
            SplittableRandom rnd = new SplittableRandom(getRuntimeContext().getTaskInfo().getAttemptNumber() + 20261122L);
            while (running && !stop) {
                Batch b = QUEUE.poll(5, TimeUnit.MILLISECONDS);
                if (b == null) continue;
                for (int i = 0; i < b.keys.length; i++) {
                    Rec r = new Rec();
                    r.key = key(b.keys[i]);
                    r.probe = b.probe;
                    r.value = new byte[b.probe ? 0 : valueBytes];
                    if (!b.probe) rnd.nextBytes(r.value);
                    synchronized (ctx.getCheckpointLock()) {
                        ctx.collect(r);
                    }
                }
                SENT.addAndGet(b.keys.length);
            }
        }

        @Override
        public void cancel() {
            running = false;
        }
    }

    /** The operator whose state is measured: one ValueState<byte[]> per key. */
    public static class Payload extends KeyedProcessFunction<String, Rec, Void> {
        private transient ValueState<byte[]> payload;

        @Override
        public void open(OpenContext ctx) {
            payload = getRuntimeContext().getState(
                    new ValueStateDescriptor<>("payload", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
            openedNs = System.nanoTime();
        }

        @Override
        public void processElement(Rec r, Context ctx, Collector<Void> out) throws Exception {
            if (r.probe) {
                byte[] v = payload.value();
                if (v != null && v.length == valueBytes) FOUND.incrementAndGet();
            } else {
                payload.update(r.value);
            }
            PROCESSED.incrementAndGet();
        }
    }

    static StreamGraph graph(Configuration conf, String restoreFrom) {
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(1);
        env.setMaxParallelism(128);
        env.addSource(new Feeder(), "feeder", TypeInformation.of(Rec.class)).uid("feeder")
                .keyBy(r -> r.key, Types.STRING).process(new Payload()).uid("payload").name("payload")
                .sinkTo(new DiscardingSink<>());
        StreamGraph g = env.getStreamGraph();
        g.setJobName("checkpoint-bench");
        g.setJobId(new JobID());
        if (restoreFrom != null) g.setSavepointRestoreSettings(SavepointRestoreSettings.forPath(restoreFrom, false));
        return g;
    }

    static void send(int[] keys, boolean probe) throws InterruptedException {
        long target = PROCESSED.get() + keys.length;
        QUEUE.put(new Batch(keys, probe));
        while (PROCESSED.get() < target) Thread.sleep(1);
    }

    static void sendAll(int n, int chunk) throws InterruptedException {
        long target = PROCESSED.get() + n;
        for (int i = 0; i < n; i += chunk) {
            int m = Math.min(chunk, n - i);
            int[] ks = new int[m];
            for (int j = 0; j < m; j++) ks[j] = i + j;
            QUEUE.put(new Batch(ks, false));
        }
        while (PROCESSED.get() < target) Thread.sleep(1);
    }

    static JobID startJob(MiniCluster mc, Configuration conf, String restoreFrom, long[] startNs) throws Exception {
        openedNs = 0;
        stop = false;
        QUEUE.clear();
        long t0 = System.nanoTime();
        JobID id = mc.submitJob(graph(conf, restoreFrom)).get().getJobID();
        long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(10);
        while (openedNs == 0) {
            JobStatus s = mc.getJobStatus(id).get();
            if (s.isGloballyTerminalState()) {
                throw new IllegalStateException("job " + id + " ended " + s + " before it opened: "
                        + mc.requestJobResult(id).get().getSerializedThrowable().map(Throwable::toString).orElse("?"));
            }
            if (System.nanoTime() > deadline) throw new IllegalStateException("job " + id + " did not open in 10 min");
            Thread.sleep(1);
        }
        startNs[0] = openedNs - t0;
        // the source must run before checkpoints can be triggered
        while (mc.getJobStatus(id).get() != JobStatus.RUNNING) Thread.sleep(1);
        return id;
    }

    static void stopJob(MiniCluster mc, JobID id) throws Exception {
        stop = true;
        mc.cancelJob(id).get();
        while (!mc.getJobStatus(id).get().isGloballyTerminalState()) Thread.sleep(5);
    }

    static Map<String, Long> listFiles(Path dir) {
        Map<String, Long> out = new HashMap<>();
        if (!Files.exists(dir)) return out;
        try (Stream<Path> s = Files.walk(dir)) {
            s.filter(Files::isRegularFile).forEach(p -> {
                try {
                    out.put(p.toString(), Files.size(p));
                } catch (IOException e) {
                    // a file removed while we list (a subsumed checkpoint): not new
                }
            });
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out;
    }

    /** Trigger one checkpoint of ``type`` and wait for its statistics. */
    static Map<String, Object> checkpoint(MiniCluster mc, JobID id, CheckpointType type, Path chkDir) throws Exception {
        Map<String, Long> before = listFiles(chkDir);
        System.gc();
        long t0 = System.nanoTime();
        long cid = mc.triggerCheckpoint(id, type).get();
        double wall = (System.nanoTime() - t0) / 1e9;
        CompletedCheckpointStats stats = null;
        for (int i = 0; i < 10_000 && stats == null; i++) {
            AbstractCheckpointStats s = mc.getExecutionGraph(id).get().getCheckpointStatsSnapshot().getHistory()
                    .getCheckpointById(cid);
            if (s instanceof CompletedCheckpointStats) stats = (CompletedCheckpointStats) s;
            else Thread.sleep(2);
        }
        if (stats == null) throw new IllegalStateException("no statistics for checkpoint " + cid);
        Map<String, Long> after = listFiles(chkDir);
        long written = 0;
        for (Map.Entry<String, Long> e : after.entrySet()) {
            if (!before.containsKey(e.getKey())) written += e.getValue();
        }
        Map<String, Object> r = new HashMap<>();
        r.put("id", cid);
        r.put("type", type.name());
        r.put("duration_s", stats.getEndToEndDuration() / 1e3);
        r.put("trigger_wall_s", wall);
        r.put("state_size_bytes", stats.getStateSize());
        r.put("checkpointed_size_bytes", stats.getCheckpointedSize());
        r.put("bytes_written", written);
        r.put("path", stats.getExternalPath());
        return r;
    }

    static Map<String, Object> restore(MiniCluster mc, Configuration conf, String path, int nKeys) throws Exception {
        PROCESSED.set(0);
        FOUND.set(0);
        long[] start = new long[1];
        JobID id = startJob(mc, conf, path, start);
        int[] probe = new int[Math.min(PROBE_KEYS, nKeys)];
        for (int i = 0; i < probe.length; i++) probe[i] = (int) ((long) i * nKeys / probe.length);
        send(probe, true);
        stopJob(mc, id);
        Map<String, Object> r = new HashMap<>();
        r.put("restore_s", start[0] / 1e9);
        r.put("probed_keys", probe.length);
        r.put("probed_keys_found", FOUND.get());
        return r;
    }

    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof String) return "\"" + ((String) o).replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Map) {
            StringBuilder b = new StringBuilder("{");
            for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
                if (b.length() > 1) b.append(", ");
                b.append(json(e.getKey().toString())).append(": ").append(json(e.getValue()));
            }
            return b.append("}").toString();
        }
        if (o instanceof List) {
            StringBuilder b = new StringBuilder("[");
            for (Object x : (List<?>) o) {
                if (b.length() > 1) b.append(", ");
                b.append(json(x));
            }
            return b.append("]").toString();
        }
        return json(o.toString());
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        long stateMb = Long.parseLong(args[1]);
        valueBytes = Integer.parseInt(args[2]);
        int rounds = Integer.parseInt(args[3]);
        Path work = Paths.get(args[4]).toAbsolutePath();
        if (!mode.equals("incremental") && !mode.equals("full")) {
            throw new IllegalArgumentException("mode must be incremental or full, not " + mode);
        }
        boolean incremental = mode.equals("incremental");
        int nKeys = (int) Math.max(100, stateMb * 1_000_000L / valueBytes);
        int nChurn = (int) Math.max(1, nKeys * CHURN);
        Path chkDir = work.resolve("checkpoints");

        Configuration conf = new Configuration();
        Map<String, String> m = new HashMap<>();
        m.put("state.backend.type", "rocksdb");
        m.put("execution.checkpointing.incremental", Boolean.toString(incremental));
        m.put("execution.checkpointing.dir", chkDir.toUri().toString());
        m.put("execution.checkpointing.interval", "1 d"); // checkpoints are triggered by hand
        m.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        m.put("execution.checkpointing.num-retained", "1000");
        m.put("state.backend.rocksdb.localdir", work.resolve("rocksdb").toString());
        m.put("taskmanager.memory.managed.size", "256m");
        m.put("rest.bind-port", "0");
        conf.addAll(Configuration.fromMap(m));

        MiniCluster mc = new MiniCluster(new MiniClusterConfiguration.Builder().setConfiguration(conf)
                .setNumTaskManagers(1).setNumSlotsPerTaskManager(1).build());
        mc.start();
        Map<String, Object> out = new HashMap<>();
        try {
            long[] start = new long[1];
            JobID id = startJob(mc, conf, null, start);
            out.put("fresh_start_s", start[0] / 1e9);
            long t0 = System.nanoTime();
            sendAll(nKeys, 10_000);
            out.put("load_s", (System.nanoTime() - t0) / 1e9);
            List<Map<String, Object>> fulls = new ArrayList<>(), incs = new ArrayList<>();
            SplittableRandom rnd = new SplittableRandom(20261122L + stateMb);
            if (incremental) out.put("incremental_first", checkpoint(mc, id, CheckpointType.INCREMENTAL, chkDir));
            for (int r = 0; r < rounds; r++) {
                Set<Integer> pick = new HashSet<>();
                while (pick.size() < nChurn) pick.add(rnd.nextInt(nKeys));
                send(pick.stream().mapToInt(Integer::intValue).sorted().toArray(), false);
                if (!incremental) {
                    fulls.add(checkpoint(mc, id, CheckpointType.CONFIGURED, chkDir));
                    continue;
                }
                // incremental first: a FULL checkpoint uploads every SST file, which the next incremental reuses
                incs.add(checkpoint(mc, id, CheckpointType.INCREMENTAL, chkDir));
                if (r == 0 || r == rounds - 1) fulls.add(checkpoint(mc, id, CheckpointType.FULL, chkDir));
            }
            stopJob(mc, id);
            // the same span for a job without state on the now warm cluster: what a restore adds is the rest
            PROCESSED.set(0);
            JobID empty = startJob(mc, conf, null, start);
            out.put("warm_start_s", start[0] / 1e9);
            stopJob(mc, empty);
            out.put("full", fulls);
            out.put("incremental", incs);
            Map<String, Object> rec = new HashMap<>();
            rec.put("full", restore(mc, conf, (String) fulls.get(fulls.size() - 1).get("path"), nKeys));
            if (incremental) rec.put("incremental", restore(mc, conf, (String) incs.get(incs.size() - 1).get("path"), nKeys));
            out.put("recovery", rec);
        } finally {
            mc.close();
        }
        out.put("mode", mode);
        out.put("state_mb", stateMb);
        out.put("keys", nKeys);
        out.put("value_bytes", valueBytes);
        out.put("churned_keys_per_round", nChurn);
        out.put("rounds", rounds);
        out.put("flink_version", org.apache.flink.runtime.util.EnvironmentInformation.getVersion());
        System.out.println("RESULT " + json(out));
        System.exit(0);
    }
}
