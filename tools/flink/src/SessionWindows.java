// Session windows whose merges make Flink's *state window* differ from the session (issue 33): out-of-order
// events that extend a session backwards and bridge two existing sessions, watermarks that fire sessions,
// allowed lateness with late elements that re-fire and merge, elements past the lateness dropped, sessions
// cleaned up; on four operators: a ProcessWindowFunction, an AggregateFunction, an evictor
// (EvictingWindowOperator, TimeEvictor) and DynamicEventTimeSessionWindows.
//
// Usage: SessionWindows <out-root> <name> <hashmap|rocksdb> <canonical|native|checkpoint|incremental>
//
// Determinism: one source task emits the events in a fixed order and, after each, a watermark of
// (max event time so far - OUT_OF_ORDER) (a punctuated generator); keyed exchanges keep that order, so every
// window subtask sees the same sequence of elements and watermarks. EXPECTED.json comes from replaying that
// sequence per key through Flink's own MergingWindowSet (the class WindowOperator keeps the session mapping
// in: it picks the state window of a merge) and the WindowOperator's rules for late elements, firing,
// eviction and cleanup, written out below.
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.function.ToLongFunction;

import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.windowing.assigners.DynamicEventTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.assigners.EventTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.assigners.MergingWindowAssigner;
import org.apache.flink.streaming.api.windowing.evictors.TimeEvictor;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.streaming.runtime.operators.windowing.MergingWindowSet;
import org.apache.flink.util.Collector;

public class SessionWindows {
    static final int USERS = Integer.getInteger("fixtures.sessusers", 6), EVENTS = 160;
    static final long BASE_TS = 1_700_000_000_000L, GAP = 10_000, LATENESS = 120_000, OUT_OF_ORDER = 15_000,
            EVICT = 3_000;
    static final int BACK_MIN = Integer.getInteger("fixtures.backmin", 10_000), BACK_RANGE = Integer.getInteger("fixtures.backrange", 20_000);
    static final String FIXED_JOB_ID = "f1500000000000000000000000000033";

    /** Event i: time moves forward ~2.5 s an event on average, a third of the events jump back 10-30 s
     *  (out of order), one in 25 jumps back 150-180 s (past the lateness: dropped). */
    static ProductionFixtures.Event event(long i) {
        SplittableRandom r = new SplittableRandom(0x5e55_0000L + i);
        ProductionFixtures.Event e = new ProductionFixtures.Event();
        e.user = String.format("user-%d", r.nextInt(USERS));
        e.category = ProductionFixtures.CATEGORIES[r.nextInt(ProductionFixtures.CATEGORIES.length)];
        e.amount = 1 + r.nextInt(100);
        e.seq = i;
        long back = r.nextInt(25) == 0 ? 150_000 + r.nextInt(30_000) : r.nextInt(3) == 0 ? BACK_MIN + r.nextInt(BACK_RANGE) : 0;
        e.ts = BASE_TS + i * 2_500 + r.nextInt(1000) - back;
        return e;
    }

    static long dynamicGap(ProductionFixtures.Event e) { return 5_000 + (e.amount % 3) * 5_000; }

    static long watermarkAfter(long maxTs) { return maxTs - OUT_OF_ORDER; }

    // ---------------------------------------------------------------- the model ----------------------------
    /** A ListState held in memory, for Flink's MergingWindowSet. */
    static final class MemList<T> implements ListState<T> {
        final List<T> items = new ArrayList<>();
        public Iterable<T> get() { return items; }
        public void add(T v) { items.add(v); }
        public void update(List<T> v) { items.clear(); items.addAll(v); }
        public void addAll(List<T> v) { items.addAll(v); }
        public void clear() { items.clear(); }
    }

    /** One key's session windows as WindowOperator keeps them: the mapping state, read into a new
     *  MergingWindowSet for every element and timer and persisted after it, as WindowOperator does. */
    static final class KeySessions {
        final MergingWindowAssigner<Object, TimeWindow> assigner;
        final MemList<Tuple2<TimeWindow, TimeWindow>> mapping = new MemList<>();
        final Map<TimeWindow, List<ProductionFixtures.Event>> contents = new HashMap<>();  // by state window
        final boolean evict;
        KeySessions(MergingWindowAssigner<Object, TimeWindow> assigner, boolean evict) {
            this.assigner = assigner;
            this.evict = evict;
        }
        MergingWindowSet<TimeWindow> open() {
            try {
                return new MergingWindowSet<>(assigner, mapping);
            } catch (Exception ex) {
                throw new IllegalStateException(ex);
            }
        }
    }

    static final Map<String, int[]> STATS = new TreeMap<>();  // operator -> bridges, late, dropped, cleaned, backward extensions

    /** Replays the job's elements and watermarks for one operator; returns key -> KeySessions. */
    @SuppressWarnings("unchecked")
    static Map<String, KeySessions> model(String op, MergingWindowAssigner<?, TimeWindow> assigner,
                                          ToLongFunction<ProductionFixtures.Event> gap, boolean evict) throws Exception {
        Map<String, KeySessions> keys = new TreeMap<>();
        int[] stats = STATS.computeIfAbsent(op, o -> new int[5]);
        long wm = Long.MIN_VALUE, maxTs = Long.MIN_VALUE;
        for (long i = 0; i < EVENTS; i++) {
            ProductionFixtures.Event e = event(i);
            KeySessions ks = keys.get(e.user);
            if (ks == null) keys.put(e.user, ks = new KeySessions((MergingWindowAssigner<Object, TimeWindow>) assigner, evict));
            final KeySessions k = ks;
            final long w0 = wm;
            TimeWindow window = new TimeWindow(e.ts, e.ts + gap.applyAsLong(e));
            MergingWindowSet<TimeWindow> set = k.open();
            TimeWindow actual = set.addWindow(window, (result, merged, stateResult, mergedState) -> {
                if (result.maxTimestamp() + LATENESS <= w0) throw new IllegalStateException("late merge result " + result);
                int existing = merged.size() - (merged.contains(window) ? 1 : 0);
                if (existing >= 2) stats[0]++;  // two existing sessions bridged
                for (TimeWindow m : merged) if (m != window && window.getStart() < m.getStart()) stats[4]++;  // extended backwards
                List<ProductionFixtures.Event> into = k.contents.computeIfAbsent(stateResult, s -> new ArrayList<>());
                for (TimeWindow s : mergedState) {
                    List<ProductionFixtures.Event> from = k.contents.remove(s);
                    if (from != null) into.addAll(from);
                }
            });
            if (actual.maxTimestamp() + LATENESS <= wm) {  // WindowOperator.isWindowLate: dropped
                set.retireWindow(actual);
                stats[2]++;
            } else {
                TimeWindow stateWindow = set.getStateWindow(actual);
                k.contents.computeIfAbsent(stateWindow, s -> new ArrayList<>()).add(e);
                if (actual.maxTimestamp() <= wm) {  // EventTimeTrigger.onElement: a late element fires at once
                    stats[1]++;
                    fire(k, stateWindow);
                }
            }
            set.persist();
            // the watermark after the element: every key's timers up to it, in time order
            maxTs = Math.max(maxTs, e.ts);
            long w1 = Math.max(wm, watermarkAfter(maxTs));
            if (w1 > wm) {
                for (KeySessions other : keys.values()) advance(other, wm, w1, stats);
                wm = w1;
            }
        }
        return keys;
    }

    /** Timers of one key in (w0, w1]: a session's end timer fires it, its cleanup timer (end + lateness) clears it. */
    static void advance(KeySessions k, long w0, long w1, int[] stats) {
        TreeMap<Long, List<Object[]>> timers = new TreeMap<>();
        for (Tuple2<TimeWindow, TimeWindow> m : windows(k)) {
            long fireAt = m.f0.maxTimestamp(), cleanAt = m.f0.maxTimestamp() + LATENESS;
            if (fireAt > w0 && fireAt <= w1) timers.computeIfAbsent(fireAt, t -> new ArrayList<>()).add(new Object[] {m, false});
            if (cleanAt > w0 && cleanAt <= w1) timers.computeIfAbsent(cleanAt, t -> new ArrayList<>()).add(new Object[] {m, true});
        }
        for (List<Object[]> at : timers.values()) {
            for (Object[] t : at) {
                @SuppressWarnings("unchecked")
                Tuple2<TimeWindow, TimeWindow> m = (Tuple2<TimeWindow, TimeWindow>) t[0];
                MergingWindowSet<TimeWindow> set = k.open();
                TimeWindow stateWindow = set.getStateWindow(m.f0);
                if (stateWindow == null) continue;  // (WindowOperator.onEventTime: the window is gone)
                if ((Boolean) t[1]) {
                    k.contents.remove(stateWindow);
                    set.retireWindow(m.f0);
                    try {
                        set.persist();
                    } catch (Exception ex) {
                        throw new IllegalStateException(ex);
                    }
                    stats[3]++;
                } else {
                    fire(k, stateWindow);
                }
            }
        }
    }

    /** The (window, state window) pairs of a key now, as persisted. */
    static List<Tuple2<TimeWindow, TimeWindow>> windows(KeySessions k) {
        return new ArrayList<>(k.mapping.items);
    }

    /** A firing: TimeEvictor.evictBefore drops the elements at or before (latest element time - EVICT). */
    static void fire(KeySessions k, TimeWindow stateWindow) {
        if (!k.evict) return;
        List<ProductionFixtures.Event> c = k.contents.get(stateWindow);
        if (c == null || c.isEmpty()) return;
        long max = Long.MIN_VALUE;
        for (ProductionFixtures.Event e : c) max = Math.max(max, e.ts);
        long cutoff = max - EVICT;
        c.removeIf(e -> e.ts <= cutoff);
    }

    static void expect(Expect x, String op, Map<String, KeySessions> keys, String contentsType, boolean aggregate) {
        for (Map.Entry<String, KeySessions> kv : keys.entrySet()) {
            String key = kv.getKey();
            for (Tuple2<TimeWindow, TimeWindow> m : windows(kv.getValue())) {
                Object ns = Expect.timeWindow(m.f1.getStart(), m.f1.getEnd());
                x.entry(op, "merging-window-set", "list", "List<Tuple2<TimeWindow, TimeWindow>>", key, null, Expect.ANY,
                        new Expect.Raw("{\"type\": \"tuple\", \"fields\": [" + Expect.enc(Expect.timeWindow(m.f0.getStart(),
                                m.f0.getEnd())) + ", " + Expect.enc(ns) + "]}"));
                List<ProductionFixtures.Event> c = kv.getValue().contents.getOrDefault(m.f1, List.of());
                if (aggregate) {
                    if (c.isEmpty()) continue;
                    ProductionFixtures.AvgAcc a = new ProductionFixtures.AvgAcc();
                    for (ProductionFixtures.Event e : c) { a.sum += e.amount; a.count++; }
                    x.entry(op, "window-contents", "aggregating", contentsType, key, ns, null, a);
                } else {
                    for (ProductionFixtures.Event e : c) {  // list order follows merges: not asserted
                        x.entry(op, "window-contents", "list", contentsType, key, ns, Expect.ANY, contentsType.contains("StreamRecord")
                                ? new Expect.Raw("{\"type\": \"stream_record\", \"timestamp\": " + e.ts + ", \"value\": "
                                        + Expect.enc(e) + "}") : e);
                    }
                }
            }
        }
    }

    // ---------------------------------------------------------------- the job ------------------------------
    public static class Summary extends org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction<
            ProductionFixtures.Event, String, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<ProductionFixtures.Event> els, Collector<String> out) {}
    }

    /** Emits (max event time - OUT_OF_ORDER) after every event: the watermarks follow the elements in order. */
    static final class Punctuated implements WatermarkGenerator<ProductionFixtures.Event> {
        long max = Long.MIN_VALUE;
        public void onEvent(ProductionFixtures.Event e, long ts, WatermarkOutput out) {
            max = Math.max(max, e.ts);
            out.emitWatermark(new Watermark(watermarkAfter(max)));
        }
        public void onPeriodicEmit(WatermarkOutput out) {}
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
        Path outRoot = Paths.get(args[0]);
        String name = args[1], backend = args[2], mode = args[3];
        boolean checkpointMode = mode.equals("checkpoint") || mode.equals("incremental");
        Path work = Files.createTempDirectory("flink-fixture-" + name);
        Path jobDir = work.resolve("checkpoints").resolve(FIXED_JOB_ID);
        Map<String, String> conf = new HashMap<>();
        conf.put("$internal.pipeline.job-id", FIXED_JOB_ID);
        conf.put("state.backend.type", backend);
        conf.put("execution.checkpointing.dir", work.resolve("checkpoints").toUri().toString());
        conf.put("execution.checkpointing.savepoint-dir", work.resolve("savepoints").toUri().toString());
        conf.put("execution.checkpointing.incremental", Boolean.toString(mode.equals("incremental")));
        conf.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
        conf.put("execution.checkpointing.num-retained", "1");
        conf.put("taskmanager.numberOfTaskSlots", "8");
        conf.put("rest.bind-port", "0");
        conf.put("pipeline.max-parallelism", "128");
        conf.put("pipeline.auto-watermark-interval", "0 ms");  // only the punctuated watermarks
        conf.put("state.backend.rocksdb.memory.managed", "true");
        conf.put("taskmanager.memory.managed.size", "256m");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        env.setParallelism(2);
        env.setMaxParallelism(128);
        if (checkpointMode) env.enableCheckpointing(300);

        DataStream<ProductionFixtures.Event> stream = env.fromSequence(0, Long.MAX_VALUE).setParallelism(1).uid("sequence")
                .name("sequence")
                .flatMap((Long i, Collector<ProductionFixtures.Event> out) -> {
                    if (i < EVENTS) out.collect(event(i));
                    else Thread.sleep(20);
                }).returns(TypeInformation.of(ProductionFixtures.Event.class)).setParallelism(1).uid("events").name("events")
                .assignTimestampsAndWatermarks(WatermarkStrategy.<ProductionFixtures.Event>forGenerator(c -> new Punctuated())
                        .withTimestampAssigner((e, t) -> e.ts))
                .setParallelism(1).uid("timestamps").name("timestamps");
        KeyedStream<ProductionFixtures.Event, String> byUser = stream.keyBy(e -> e.user, Types.STRING);
        byUser.window(EventTimeSessionWindows.withGap(Duration.ofMillis(GAP))).allowedLateness(Duration.ofMillis(LATENESS))
                .process(new Summary()).uid("session-process").name("session-process");
        byUser.window(EventTimeSessionWindows.withGap(Duration.ofMillis(GAP))).allowedLateness(Duration.ofMillis(LATENESS))
                .aggregate(new ProductionFixtures.AvgAgg()).uid("session-aggregate").name("session-aggregate");
        byUser.window(EventTimeSessionWindows.withGap(Duration.ofMillis(GAP))).allowedLateness(Duration.ofMillis(LATENESS))
                .evictor(TimeEvictor.of(Duration.ofMillis(EVICT))).process(new Summary())
                .uid("session-evictor").name("session-evictor");
        byUser.window(DynamicEventTimeSessionWindows.withDynamicGap(SessionWindows::dynamicGap))
                .allowedLateness(Duration.ofMillis(LATENESS)).process(new Summary())
                .uid("session-dynamic").name("session-dynamic");

        Expect x = new Expect();
        expect(x, "session-process", model("session-process", EventTimeSessionWindows.withGap(Duration.ofMillis(GAP)),
                e -> GAP, false), "List<POJO Event>", false);
        expect(x, "session-aggregate", model("session-aggregate", EventTimeSessionWindows.withGap(Duration.ofMillis(GAP)),
                e -> GAP, false), "POJO AvgAcc", true);
        expect(x, "session-evictor", model("session-evictor", EventTimeSessionWindows.withGap(Duration.ofMillis(GAP)),
                e -> GAP, true), "List<StreamRecord<POJO Event>>", false);
        expect(x, "session-dynamic", model("session-dynamic",
                DynamicEventTimeSessionWindows.<ProductionFixtures.Event>withDynamicGap(SessionWindows::dynamicGap),
                SessionWindows::dynamicGap, false), "List<POJO Event>", false);
        Map<String, Object> stats = new LinkedHashMap<>();
        for (Map.Entry<String, int[]> s : STATS.entrySet()) {
            int[] v = s.getValue();
            stats.put(s.getKey(), "existing sessions bridged " + v[0] + ", sessions extended backwards " + v[4]
                    + ", late elements fired " + v[1]
                    + ", dropped past lateness " + v[2] + ", sessions cleaned up " + v[3]);
        }
        System.err.println(stats);
        if (Boolean.getBoolean("fixtures.modelonly")) System.exit(0);  // (to tune the input: the replay's counts only)

        JobClient client = env.executeAsync("fixture-" + name);
        Thread.sleep(8000);
        Path dest = outRoot.resolve(name);
        ProductionFixtures.deleteTree(dest);
        Files.createDirectories(dest.getParent());
        String kind;
        if (checkpointMode) {
            Thread.sleep(2500);
            client.cancel().get();
            Files.move(jobDir, dest, StandardCopyOption.ATOMIC_MOVE);
            kind = mode.equals("incremental") ? "incremental-checkpoint" : "checkpoint";
        } else {
            SavepointFormatType fmt = mode.equals("native") ? SavepointFormatType.NATIVE : SavepointFormatType.CANONICAL;
            String sp = client.triggerSavepoint(work.resolve("savepoints").toUri().toString(), fmt).get();
            client.cancel().get();
            Files.move(Paths.get(new java.net.URI(sp)), dest, StandardCopyOption.ATOMIC_MOVE);
            kind = mode.equals("native") ? "native-savepoint" : "canonical-savepoint";
        }
        x.put("generator", "tools/flink/src/SessionWindows.java")
                .put("flink_version", org.apache.flink.runtime.util.EnvironmentInformation.getVersion())
                .put("name", name).put("job", "sessions").put("backend", backend).put("kind", kind)
                .put("changelog", false).put("file_merging", false)
                .put("parallelism", 2).put("max_parallelism", 128).put("events", EVENTS)
                .put("model", stats)
                .put("uids", new ArrayList<>(x.ops.keySet()))
                .put("operator_match", "uid");
        x.write(dest.resolve("EXPECTED.json"));
        ProductionFixtures.deleteTree(work);
        System.out.println("wrote " + dest);
        System.exit(0);
    }
}
