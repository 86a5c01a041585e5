// Builds real Apache Flink snapshots for State Explorer's tests and benchmarks.
//
// A deterministic, skewed event stream (planted hot keys) runs through two keyed
// operators on a local mini cluster; then the driver takes a canonical or native
// savepoint, or keeps a retained (incremental) checkpoint, and writes
// EXPECTED.json: what the job itself knows must be in the state (per-key counts,
// sums, map entries, list lengths, timers, hot keys). Tests compare the Python
// reader against that file, never against hard-coded numbers.
//
// Usage: StateFixtures <out-root> <name> <hashmap|rocksdb> <canonical|native|checkpoint|incremental|sql>
//                      <events> <keys> [compress]
import java.io.File;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.BroadcastState;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ReducingState;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.table.api.Table;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.util.Collector;

public class StateFixtures {

    static final long BASE_TS = 1_700_000_000_000L; // event time of event 0 (ms)
    static final long FAR_PROCESSING_TIMER = 4_102_444_800_000L; // 2100-01-01, never fires
    static final long EVENT_TIMER_OFFSET = 30L * 24 * 3600 * 1000; // 30 days, never fires
    static final String[] CATEGORIES = {"books", "games", "music", "food", "travel"};
    static final String[] HOT_KEYS = {"user-0007", "user-0042", "\u30e6\u30fc\u30b6\u30fc-\ud83d\udd25"};
    static final AtomicLong PROCESSED = new AtomicLong();
    static final AtomicLong EMITTED = new AtomicLong();

    /** The event type: a Flink POJO (public fields, no-arg constructor). */
    public static class Event {
        public String user;
        public String category;
        public long amount;
        public double price;
        public long ts;
        public Event() {}
    }

    /** Per-user aggregate kept in ValueState: a POJO value. */
    public static class UserStats {
        public long count;
        public long total;
        public double maxPrice;
        public String lastCategory;
        public UserStats() {}
    }

    /** Event i of the stream, a pure function of i and the key count. */
    static Event event(long i, int keys) {
        SplittableRandom r = new SplittableRandom(0x5eed_0000L + i);
        Event e = new Event();
        int pick = r.nextInt(100);
        if (pick < 20) e.user = HOT_KEYS[0];          // 20% of traffic
        else if (pick < 30) e.user = HOT_KEYS[1];     // 10%
        else if (pick < 35) e.user = HOT_KEYS[2];     // 5%, a non-ASCII key
        else e.user = String.format("user-%04d", r.nextInt(keys));
        e.category = CATEGORIES[r.nextInt(CATEGORIES.length)];
        e.amount = 1 + r.nextInt(100);
        e.price = Math.round(r.nextDouble() * 10000) / 100.0;
        e.ts = BASE_TS + i * 10;
        return e;
    }

    /** Keyed by user: ValueState (POJO, TTL Long, Tuple2), ListState, MapState with TTL, timers. */
    public static class UserState extends KeyedProcessFunction<String, Event, String> {
        transient ValueState<UserStats> stats;
        transient ValueState<Long> lastSeen;
        transient ValueState<Tuple2<String, Integer>> first;
        transient ListState<Long> amounts;
        transient ListState<Long> recentAmounts;
        transient MapState<String, Long> perCategory;

        @Override
        public void open(OpenContext ctx) {
            stats = getRuntimeContext().getState(new ValueStateDescriptor<>("stats", UserStats.class));
            ValueStateDescriptor<Long> ls = new ValueStateDescriptor<>("last_seen", Types.LONG);
            ls.enableTimeToLive(StateTtlConfig.newBuilder(Duration.ofHours(1)).updateTtlOnCreateAndWrite()
                    .neverReturnExpired().build());
            lastSeen = getRuntimeContext().getState(ls);
            first = getRuntimeContext().getState(new ValueStateDescriptor<>("first_event",
                    TypeInformation.of(new TypeHint<Tuple2<String, Integer>>() {})));
            amounts = getRuntimeContext().getListState(new ListStateDescriptor<>("amounts", Types.LONG));
            ListStateDescriptor<Long> ra = new ListStateDescriptor<>("recent_amounts", Types.LONG);
            ra.enableTimeToLive(StateTtlConfig.newBuilder(Duration.ofMinutes(30)).updateTtlOnCreateAndWrite()
                    .neverReturnExpired().build());
            recentAmounts = getRuntimeContext().getListState(ra);
            MapStateDescriptor<String, Long> pc = new MapStateDescriptor<>("per_category", Types.STRING, Types.LONG);
            pc.enableTimeToLive(StateTtlConfig.newBuilder(Duration.ofDays(2)).updateTtlOnReadAndWrite()
                    .returnExpiredIfNotCleanedUp().build());
            perCategory = getRuntimeContext().getMapState(pc);
        }

        final boolean slow;

        UserState(boolean slow) {
            this.slow = slow;
        }

        @Override
        public void processElement(Event e, Context ctx, Collector<String> out) throws Exception {
            if (slow) Thread.sleep(2); // back-pressure, so unaligned checkpoints catch records in flight
            UserStats s = stats.value();
            if (s == null) s = new UserStats();
            s.count++;
            s.total += e.amount;
            s.maxPrice = Math.max(s.maxPrice, e.price);
            s.lastCategory = e.category;
            stats.update(s);
            lastSeen.update(e.ts);
            if (first.value() == null) first.update(Tuple2.of(e.category, (int) (e.ts % 1000)));
            amounts.add(e.amount);
            if (e.amount > 90) recentAmounts.add(e.amount); // a TTL'd list: each element has its own timestamp
            Long c = perCategory.get(e.category);
            perCategory.put(e.category, c == null ? 1L : c + 1);
            ctx.timerService().registerEventTimeTimer(eventTimer(e.ts));
            ctx.timerService().registerProcessingTimeTimer(FAR_PROCESSING_TIMER);
            PROCESSED.incrementAndGet();
        }
    }

    static long eventTimer(long ts) {
        return (ts / 60_000 + 1) * 60_000 + EVENT_TIMER_OFFSET;
    }

    /** Keyed by a Long bucket: ReducingState of amounts (Long keys test key-group hashing of longs). */
    public static class BucketSum extends KeyedProcessFunction<Long, Event, String> {
        transient ReducingState<Long> sum;

        @Override
        public void open(OpenContext ctx) {
            sum = getRuntimeContext().getReducingState(
                    new ReducingStateDescriptor<>("amount_sum", Long::sum, Types.LONG));
        }

        @Override
        public void processElement(Event e, Context ctx, Collector<String> out) throws Exception {
            sum.add(e.amount);
            PROCESSED.incrementAndGet();
        }
    }

    /** Counts records per subtask into union list state and broadcast state (operator state). */
    public static class CountingMap extends RichMapFunction<Event, Event> implements CheckpointedFunction {
        transient ListState<Long> perSubtask;
        transient BroadcastState<String, Long> bySubtask;
        long count;

        @Override
        public Event map(Event e) {
            count++;
            return e;
        }

        @Override
        public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
            perSubtask.update(java.util.Collections.singletonList(count));
            bySubtask.put("records@" + getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), count);
        }

        @Override
        public void initializeState(FunctionInitializationContext ctx) throws Exception {
            perSubtask = ctx.getOperatorStateStore().getUnionListState(
                    new ListStateDescriptor<>("records_per_subtask", Types.LONG));
            bySubtask = ctx.getOperatorStateStore().getBroadcastState(
                    new MapStateDescriptor<>("records_by_subtask", Types.STRING, Types.LONG));
        }
    }

    /** Counts events per user and 30 s event-time window (AggregatingState in a TimeWindow namespace). */
    public static class CountAgg implements AggregateFunction<Event, Long, Long> {
        public Long createAccumulator() { return 0L; }
        public Long add(Event e, Long acc) { PROCESSED.incrementAndGet(); return acc + 1; }
        public Long getResult(Long acc) { return acc; }
        public Long merge(Long a, Long b) { return a + b; }
    }

    static final long WINDOW_MS = 30_000;

    static long bucketOf(Event e) {
        return (e.amount * 7919L) % 50 - 25; // negative and positive Long keys
    }

    public static void main(String[] args) throws Exception {
        Path outRoot = Paths.get(args[0]);
        String name = args[1];
        String backend = args[2];
        String mode = args[3];
        long events = Long.parseLong(args[4]);
        int keys = Integer.parseInt(args[5]);
        boolean compress = args.length > 6 && args[6].equals("compress");
        int parallelism = 2;
        // 128 keeps a 1-byte key-group prefix in keys; more than 128 needs 2 bytes
        int maxParallelism = Integer.getInteger("fixtures.max.parallelism", 128);

        Path work = Files.createTempDirectory("flink-fixture-" + name);
        // "unaligned": a slowed-down job whose retained unaligned checkpoint holds in-flight records
        boolean unaligned = mode.equals("unaligned");
        boolean checkpointMode = mode.equals("checkpoint") || mode.equals("incremental") || unaligned;

        Map<String, String> conf = new HashMap<>();
        conf.put("state.backend.type", backend);
        conf.put("execution.checkpointing.dir", work.resolve("checkpoints").toUri().toString());
        conf.put("execution.checkpointing.savepoint-dir", work.resolve("savepoints").toUri().toString());
        conf.put("execution.checkpointing.incremental", Boolean.toString(mode.equals("incremental")));
        conf.put("execution.checkpointing.snapshot-compression", Boolean.toString(compress));
        conf.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        conf.put("execution.checkpointing.num-retained", "1");
        // the same settings under their Flink 1.x names (older releases read these)
        conf.put("state.checkpoints.dir", work.resolve("checkpoints").toUri().toString());
        conf.put("state.savepoints.dir", work.resolve("savepoints").toUri().toString());
        conf.put("state.backend.incremental", Boolean.toString(mode.equals("incremental")));
        conf.put("state.checkpoints.num-retained", "1");
        conf.put("taskmanager.numberOfTaskSlots", "4");
        conf.put("execution.checkpointing.unaligned.enabled", Boolean.toString(unaligned));
        conf.put("execution.checkpointing.unaligned", Boolean.toString(unaligned));
        conf.put("execution.checkpointing.aligned-checkpoint-timeout", "0 ms");
        conf.put("rest.bind-port", "0");
        conf.put("pipeline.max-parallelism", Integer.toString(maxParallelism));
        // keep RocksDB small and quick
        conf.put("state.backend.rocksdb.memory.managed", "true");
        conf.put("taskmanager.memory.managed.size", "256m");
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        env.setParallelism(parallelism);
        env.setMaxParallelism(maxParallelism);
        // frequent checkpoints for the small fixtures; -Dfixtures.checkpoint.ms=2000 for big ones
        if (checkpointMode) env.enableCheckpointing(Long.getLong("fixtures.checkpoint.ms", 300));

        final long n = events;
        final int k = keys;
        final boolean pauseHalfway = mode.equals("incremental");
        GeneratorFunction<Long, Event> gen = i -> {
            if (i >= n) { // all real events emitted: idle, so snapshots see the final state
                Thread.sleep(20);
                return null;
            }
            if (pauseHalfway && i == n / 2) Thread.sleep(1500); // let checkpoints complete mid-stream
            EMITTED.incrementAndGet();
            return event(i, k);
        };
        DataGeneratorSource<Event> source =
                new DataGeneratorSource<>(gen, Long.MAX_VALUE, TypeInformation.of(Event.class));
        DataStream<Event> stream = env.fromSource(source, WatermarkStrategy.<Event>forMonotonousTimestamps()
                        .withTimestampAssigner((e, t) -> e == null ? t : e.ts), "events")
                .setParallelism(1).uid("events-source")
                .filter(e -> e != null).setParallelism(1).uid("drop-idle").name("drop-idle");

        long perEventOps;
        TableResult sqlResult = null;
        if (mode.equals("sql")) {
            StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
            tEnv.createTemporaryView("events", stream);
            tEnv.executeSql("CREATE TABLE per_user (user_name STRING, cnt BIGINT, total BIGINT, max_price DOUBLE, "
                    + "PRIMARY KEY (user_name) NOT ENFORCED) WITH ('connector' = 'blackhole')");
            sqlResult = tEnv.executeSql("INSERT INTO per_user SELECT `user`, COUNT(*), SUM(amount), MAX(price) "
                    + "FROM events GROUP BY `user`");
            perEventOps = 0;
        } else {
            // partitioned by user, so every user's events stay in order (first/last values are deterministic)
            // (unaligned checkpoints refuse custom partitioners: that fixture is cut mid-stream anyway)
            DataStream<Event> parted = unaligned ? stream.rebalance() : stream
                    .partitionCustom((String user, int parts) -> Math.floorMod(user.hashCode(), parts), (Event e) -> e.user);
            DataStream<Event> counted = parted.map(new CountingMap()).uid("counting-map").name("counting-map");
            counted.keyBy(e -> e.user, Types.STRING).process(new UserState(unaligned)).uid("user-state").name("user-state")
                    .sinkTo(new DiscardingSink<>()).uid("sink-users").name("sink-users");
            counted.keyBy(StateFixtures::bucketOf, Types.LONG).process(new BucketSum()).uid("bucket-state")
                    .name("bucket-state").sinkTo(new DiscardingSink<>()).uid("sink-buckets").name("sink-buckets");
            counted.keyBy(e -> e.user, Types.STRING)
                    .window(TumblingEventTimeWindows.of(Duration.ofMillis(WINDOW_MS)))
                    .aggregate(new CountAgg()).uid("user-windows").name("user-windows")
                    .sinkTo(new DiscardingSink<>()).uid("sink-windows").name("sink-windows");
            perEventOps = 3;
        }

        JobClient client = sqlResult != null ? sqlResult.getJobClient().get() : env.executeAsync("state-fixtures-" + name);
        long deadline = System.currentTimeMillis() + 1000 * Long.getLong("fixtures.deadline.s", 1800);
        if (unaligned) {
            Thread.sleep(6000); // several unaligned checkpoints while the job is back-pressured
        } else if (perEventOps > 0) {
            while (PROCESSED.get() < perEventOps * events) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("job too slow");
                Thread.sleep(50);
            }
        } else {
            while (EMITTED.get() < events) Thread.sleep(50);
            Thread.sleep(3000); // the GROUP BY runs right behind the source (no mini-batch)
        }
        Thread.sleep(1000); // let the last periodic watermark close every window it can
        Path dest = outRoot.resolve(name);
        deleteTree(dest);
        Files.createDirectories(dest.getParent());
        String kind;
        if (checkpointMode) {
            // a few more checkpoints so the retained one holds the final state
            if (!unaligned) Thread.sleep(2500);
            client.cancel().get();
            Path jobDir = work.resolve("checkpoints").resolve(client.getJobID().toString());
            Files.move(jobDir, dest, StandardCopyOption.ATOMIC_MOVE);
            kind = mode.equals("incremental") ? "incremental-checkpoint" : unaligned ? "unaligned-checkpoint" : "checkpoint";
        } else {
            SavepointFormatType fmt = mode.equals("native") ? SavepointFormatType.NATIVE : SavepointFormatType.CANONICAL;
            String sp = client.triggerSavepoint(work.resolve("savepoints").toUri().toString(), fmt).get();
            client.cancel().get();
            Files.move(Paths.get(new java.net.URI(sp)), dest, StandardCopyOption.ATOMIC_MOVE);
            kind = mode.equals("native") ? "native-savepoint" : "canonical-savepoint";
            if (mode.equals("sql")) kind = "canonical-savepoint";
        }
        writeExpected(dest.resolve("EXPECTED.json"), name, backend, kind, mode, compress, events, keys,
                parallelism, maxParallelism);
        deleteTree(work);
        System.out.println("wrote " + dest);
        System.exit(0);
    }

    static void writeExpected(Path file, String name, String backend, String kind, String mode, boolean compress,
                              long events, int keys, int parallelism, int maxParallelism) throws IOException {
        TreeMap<String, long[]> perUser = new TreeMap<>(); // count, total
        TreeMap<String, TreeMap<String, Long>> perCat = new TreeMap<>();
        TreeMap<String, TreeSet<Long>> timers = new TreeMap<>();
        TreeMap<String, Double> maxPrice = new TreeMap<>();
        TreeMap<Long, Long> bucketSums = new TreeMap<>();
        TreeMap<String, TreeMap<Long, Long>> openWindows = new TreeMap<>(); // user -> window start -> count
        long maxTs = BASE_TS + (events - 1) * 10;
        for (long i = 0; i < events; i++) {
            Event e = event(i, keys);
            long[] a = perUser.computeIfAbsent(e.user, u -> new long[2]);
            a[0]++;
            a[1] += e.amount;
            perCat.computeIfAbsent(e.user, u -> new TreeMap<>()).merge(e.category, 1L, Long::sum);
            timers.computeIfAbsent(e.user, u -> new TreeSet<>()).add(eventTimer(e.ts));
            maxPrice.merge(e.user, e.price, Math::max);
            bucketSums.merge(bucketOf(e), e.amount, Long::sum);
            long start = e.ts - Math.floorMod(e.ts, WINDOW_MS);
            if (start + WINDOW_MS > maxTs) { // the final watermark (maxTs - 1) has not closed this window
                openWindows.computeIfAbsent(e.user, u -> new TreeMap<>()).merge(start, 1L, Long::sum);
            }
        }
        List<Map.Entry<String, long[]>> byCount = new ArrayList<>(perUser.entrySet());
        byCount.sort(Comparator.comparingLong((Map.Entry<String, long[]> x) -> -x.getValue()[0])
                .thenComparing(Map.Entry::getKey));
        StringBuilder b = new StringBuilder("{\n");
        b.append(" \"generator\": \"tools/flink/src/StateFixtures.java\",\n");
        b.append(" \"flink_version\": \"").append(org.apache.flink.runtime.util.EnvironmentInformation.getVersion()).append("\",\n");
        b.append(" \"name\": \"").append(name).append("\", \"backend\": \"").append(backend)
                .append("\", \"kind\": \"").append(kind).append("\", \"job\": \"").append(mode.equals("sql") ? "sql" : "datastream")
                .append("\", \"snapshot_compression\": ").append(compress).append(",\n");
        b.append(" \"events\": ").append(events).append(", \"parallelism\": ").append(parallelism)
                .append(", \"max_parallelism\": ").append(maxParallelism).append(",\n");
        b.append(" \"processed_records\": ").append(PROCESSED.get()).append(",\n");
        // an unaligned fixture is cut mid-stream: only invariants that hold at every checkpoint apply
        b.append(" \"complete\": ").append(!mode.equals("unaligned")).append(",\n");
        b.append(" \"hot_keys\": [");
        for (int i = 0; i < 3; i++) {
            b.append(i > 0 ? ", " : "").append("[").append(json(byCount.get(i).getKey())).append(", ")
                    .append(byCount.get(i).getValue()[0]).append("]");
        }
        b.append("],\n \"operators\": ");
        b.append(mode.equals("sql") ? "[\"GroupAggregate\"]" : "{\"user-state\": [\"stats\", \"last_seen\", \"first_event\", "
                + "\"amounts\", \"recent_amounts\", \"per_category\"], \"bucket-state\": [\"amount_sum\"], \"user-windows\": [\"window-contents\"]}");
        b.append(",\n \"ttl_ms\": {\"last_seen\": 3600000, \"per_category\": 172800000, \"recent_amounts\": 1800000},\n");
        b.append(" \"processing_timer\": ").append(FAR_PROCESSING_TIMER).append(",\n");
        b.append(" \"users\": {\n");
        boolean first = true;
        // benchmark snapshots (many keys) keep EXPECTED.json small: totals only
        boolean perUserDetail = keys <= 100_000;
        b.insert(b.lastIndexOf(" \"users\""), " \"total_count\": " + events + ", \"distinct_users\": " + perUser.size() + ",\n");
        for (Map.Entry<String, long[]> e : perUserDetail ? perUser.entrySet() : new TreeMap<String, long[]>().entrySet()) {
            String u = e.getKey();
            b.append(first ? "" : ",\n").append("  ").append(json(u)).append(": {\"count\": ").append(e.getValue()[0])
                    .append(", \"total\": ").append(e.getValue()[1])
                    .append(", \"max_price\": ").append(maxPrice.get(u))
                    .append(", \"event_timers\": ").append(timers.get(u).size())
                    .append(", \"per_category\": {");
            boolean f2 = true;
            for (Map.Entry<String, Long> c : perCat.get(u).entrySet()) {
                b.append(f2 ? "" : ", ").append(json(c.getKey())).append(": ").append(c.getValue());
                f2 = false;
            }
            b.append("}}");
            first = false;
        }
        b.append("\n },\n \"window_ms\": ").append(WINDOW_MS).append(",\n \"open_windows\": {");
        first = true;
        for (Map.Entry<String, TreeMap<Long, Long>> e : perUserDetail ? openWindows.entrySet() : new TreeMap<String, TreeMap<Long, Long>>().entrySet()) {
            for (Map.Entry<Long, Long> w : e.getValue().entrySet()) {
                b.append(first ? "\n  " : ",\n  ").append(json(e.getKey() + "@" + w.getKey())).append(": ").append(w.getValue());
                first = false;
            }
        }
        b.append("\n },\n \"bucket_sums\": {");
        first = true;
        for (Map.Entry<Long, Long> e : bucketSums.entrySet()) {
            b.append(first ? "" : ", ").append("\"").append(e.getKey()).append("\": ").append(e.getValue());
            first = false;
        }
        b.append("}\n}\n");
        Files.write(file, b.toString().getBytes(StandardCharsets.UTF_8));
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20 || c > 0x7e) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static void deleteTree(Path p) throws IOException {
        if (!Files.exists(p)) return;
        try (Stream<Path> s = Files.walk(p)) {
            s.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        }
    }
}
