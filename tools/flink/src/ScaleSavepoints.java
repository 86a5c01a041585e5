// Production-size Apache Flink canonical savepoints for benchmarks/bench_scale (issue 19).
//
// One keyed operator ("user-profiles", keyed by a String user id) on a local mini cluster keeps, per user:
//   profile    ValueState<Profile>       a POJO (counts, timestamps, a score, a segment name), every key
//   last_seen  ValueState<Long>           every key
//   counters   MapState<String, Long>     one key in four, 1-3 entries; the HOT users get thousands
// The source emits one event per key (phase 1); the driver waits until every event is processed and takes
// canonical savepoint <name>-a while the job keeps running; then phase 2 changes the state "a little
// later" (1 % of the keys updated, 0.5 % cleared, 0.5 % new keys) and the driver takes <name>-b and
// cancels the job. Both are CANONICAL savepoints (SavepointFormatType.CANONICAL), uncompressed.
//
// Usage: ScaleSavepoints <out-root> <name> <hashmap|rocksdb> <keys> [parallelism]
// Writes <out-root>/<name>-a/ and <out-root>/<name>-b/ (the savepoint folders, a _metadata each) and a
// SCALE.json beside them with what the job wrote (keys, entries) for the benchmark's record.
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

public class ScaleSavepoints {

    static final long BASE_TS = 1_700_000_000_000L;
    static final String[] SEGMENTS = {"free", "trial", "basic", "premium", "enterprise"};
    static final String[] COUNTERS = {"clicks", "views", "carts"};
    static final int HOT = 20;              // hot users: "hot-00".."hot-19"
    static final int HOT_ENTRIES = 5_000;   // counters entries of each hot user
    static final int OP_SET = 0, OP_UPDATE = 1, OP_CLEAR = 2, OP_HOT = 3;

    // the mini cluster runs in this JVM: the source's subtasks and the driver share these
    static final AtomicLong NEXT1 = new AtomicLong();
    static final AtomicLong NEXT2 = new AtomicLong();
    static final AtomicInteger PHASE = new AtomicInteger(1);
    static final AtomicLong PROCESSED = new AtomicLong();

    public static class Profile {
        public long events;
        public long firstTs;
        public long lastTs;
        public double score;
        public String segment;
        public Profile() {}
    }

    static String user(long id) {
        String d = Long.toString(id);
        return "user-" + "000000000".substring(d.length()) + d;
    }

    /** Phase 1 event j: key j (set its state), then the hot users' counters. */
    static Tuple3<String, Integer, Long> phase1(long j, long keys) {
        if (j < keys) return Tuple3.of(user(j), OP_SET, j);
        long h = j - keys;
        return Tuple3.of("hot-" + (h % HOT < 10 ? "0" : "") + (h % HOT), OP_HOT, h / HOT);
    }

    /** Phase 2 event j: 1 % of the keys updated, 0.5 % cleared, 0.5 % new (ids from `keys` on). */
    static Tuple3<String, Integer, Long> phase2(long j, long keys) {
        long upd = keys / 100, clr = keys / 200;
        if (j < upd) return Tuple3.of(user(j * 100 + 7), OP_UPDATE, j);
        if (j < upd + clr) return Tuple3.of(user((j - upd) * 200 + 13), OP_CLEAR, j);
        return Tuple3.of(user(keys + (j - upd - clr)), OP_SET, keys + (j - upd - clr));
    }

    public static class Profiles extends KeyedProcessFunction<String, Tuple3<String, Integer, Long>, String> {
        transient ValueState<Profile> profile;
        transient ValueState<Long> lastSeen;
        transient MapState<String, Long> counters;

        @Override
        public void open(OpenContext ctx) {
            profile = getRuntimeContext().getState(new ValueStateDescriptor<>("profile", Profile.class));
            lastSeen = getRuntimeContext().getState(new ValueStateDescriptor<>("last_seen", Types.LONG));
            counters = getRuntimeContext().getMapState(
                    new MapStateDescriptor<>("counters", Types.STRING, Types.LONG));
        }

        @Override
        public void processElement(Tuple3<String, Integer, Long> e, Context ctx, Collector<String> out)
                throws Exception {
            long id = e.f2;
            switch (e.f1) {
                case OP_SET: {
                    Profile p = new Profile();
                    p.events = 1 + id % 7;
                    p.firstTs = BASE_TS + id;
                    p.lastTs = p.firstTs + (id % 1000) * 1000;
                    p.score = (id % 10_000) / 100.0;
                    p.segment = SEGMENTS[(int) (id % SEGMENTS.length)];
                    profile.update(p);
                    lastSeen.update(p.lastTs);
                    if (id % 4 == 0) {
                        for (int c = 0; c <= id % 3; c++) counters.put(COUNTERS[c], id % 100 + c);
                    }
                    break;
                }
                case OP_UPDATE: {
                    Profile p = profile.value();
                    if (p != null) {
                        p.events += 1;
                        p.lastTs += 3_600_000;
                        profile.update(p);
                        lastSeen.update(p.lastTs);
                    }
                    break;
                }
                case OP_CLEAR:
                    profile.clear();
                    lastSeen.clear();
                    counters.clear();
                    break;
                default: { // OP_HOT
                    counters.put("item-" + id, id);
                    if (profile.value() == null) {
                        Profile p = new Profile();
                        p.segment = "hot";
                        profile.update(p);
                    }
                    Profile p = profile.value();
                    p.events += 1;
                    profile.update(p);
                }
            }
            PROCESSED.incrementAndGet();
        }
    }

    public static void main(String[] args) throws Exception {
        Path outRoot = Paths.get(args[0]);
        String name = args[1];
        String backend = args[2];
        final long keys = Long.parseLong(args[3]);
        int parallelism = args.length > 4 ? Integer.parseInt(args[4]) : 2;
        final long n1 = keys + (long) HOT * HOT_ENTRIES;
        final long n2 = keys / 100 + keys / 200 + keys / 200;

        Path work = outRoot.resolve(".work-" + name);
        deleteTree(work);
        Files.createDirectories(work);
        Map<String, String> conf = new HashMap<>();
        conf.put("state.backend.type", backend);
        conf.put("execution.checkpointing.dir", work.resolve("checkpoints").toUri().toString());
        conf.put("execution.checkpointing.savepoint-dir", work.resolve("savepoints").toUri().toString());
        conf.put("execution.checkpointing.timeout", "2 h");
        conf.put("taskmanager.numberOfTaskSlots", Integer.toString(Math.max(2, parallelism)));
        conf.put("rest.bind-port", "0");
        conf.put("pipeline.max-parallelism", "128");
        conf.put("state.backend.rocksdb.localdir", work.resolve("rocksdb").toString());
        conf.put("state.backend.rocksdb.memory.managed", "true");
        conf.put("taskmanager.memory.managed.size", "1g");
        conf.put("pekko.ask.timeout", "10 min");
        conf.put("heartbeat.timeout", "600000");
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        env.setParallelism(parallelism);
        env.setMaxParallelism(128);

        TypeInformation<Tuple3<String, Integer, Long>> type =
                TypeInformation.of(new TypeHint<Tuple3<String, Integer, Long>>() {});
        GeneratorFunction<Long, Tuple3<String, Integer, Long>> gen = i -> {
            long j = NEXT1.getAndIncrement();
            if (j < n1) return phase1(j, keys);
            if (PHASE.get() == 2) {
                long k = NEXT2.getAndIncrement();
                if (k < n2) return phase2(k, keys);
            }
            Thread.sleep(20); // idle: the mailbox stays free for the savepoints' barriers
            return null;
        };
        DataGeneratorSource<Tuple3<String, Integer, Long>> source = new DataGeneratorSource<>(gen, Long.MAX_VALUE, type);
        DataStream<Tuple3<String, Integer, Long>> stream = env.fromSource(source, WatermarkStrategy.noWatermarks(), "events")
                .uid("events-source").filter(e -> e != null).uid("drop-idle").name("drop-idle");
        stream.keyBy(e -> e.f0, Types.STRING).process(new Profiles()).uid("user-profiles").name("user-profiles")
                .sinkTo(new DiscardingSink<>()).uid("sink").name("sink");

        JobClient client = env.executeAsync("scale-savepoints-" + name);
        long t0 = System.currentTimeMillis();
        waitFor(n1, t0, "phase 1");
        Path a = savepoint(client, work, outRoot.resolve(name + "-a"));
        System.err.printf("savepoint a: %s (%.0f s)%n", a, (System.currentTimeMillis() - t0) / 1000.0);
        PHASE.set(2);
        waitFor(n1 + n2, t0, "phase 2");
        Path b = savepoint(client, work, outRoot.resolve(name + "-b"));
        client.cancel().get();
        System.err.printf("savepoint b: %s (%.0f s)%n", b, (System.currentTimeMillis() - t0) / 1000.0);
        String json = String.format("{\"generator\": \"tools/flink/src/ScaleSavepoints.java\", \"flink_version\": \"%s\", "
                        + "\"backend\": \"%s\", \"kind\": \"canonical-savepoint\", \"parallelism\": %d, "
                        + "\"max_parallelism\": 128, \"keys_a\": %d, \"keys_b\": %d, \"hot_users\": %d, "
                        + "\"hot_entries\": %d, \"updated_b\": %d, \"cleared_b\": %d, \"added_b\": %d, \"seconds\": %.1f}%n",
                org.apache.flink.runtime.util.EnvironmentInformation.getVersion(), backend, parallelism,
                keys + HOT, keys + HOT - keys / 200 + keys / 200, HOT, HOT_ENTRIES, keys / 100, keys / 200, keys / 200,
                (System.currentTimeMillis() - t0) / 1000.0);
        Files.writeString(outRoot.resolve(name + "-a").resolve("SCALE.json"), json, StandardCharsets.UTF_8);
        Files.writeString(outRoot.resolve(name + "-b").resolve("SCALE.json"), json, StandardCharsets.UTF_8);
        deleteTree(work);
        System.exit(0);
    }

    static void waitFor(long target, long t0, String what) throws InterruptedException {
        long last = 0;
        while (PROCESSED.get() < target) {
            Thread.sleep(200);
            long now = System.currentTimeMillis();
            if (now - last > 15_000) {
                System.err.printf("%s: %,d / %,d events (%.0f s)%n", what, PROCESSED.get(), target, (now - t0) / 1000.0);
                last = now;
            }
        }
    }

    static Path savepoint(JobClient client, Path work, Path dest) throws Exception {
        String sp = client.triggerSavepoint(work.resolve("savepoints").toUri().toString(), SavepointFormatType.CANONICAL).get();
        deleteTree(dest);
        Files.move(Paths.get(new URI(sp)), dest, StandardCopyOption.ATOMIC_MOVE);
        return dest;
    }

    static void deleteTree(Path p) throws java.io.IOException {
        if (!Files.exists(p)) return;
        try (Stream<Path> s = Files.walk(p)) {
            s.sorted(Comparator.reverseOrder()).forEach(x -> x.toFile().delete());
        }
    }
}
