// Restores savepoints into real Apache Flink jobs and prints every keyed state entry they hold (issue 32:
// "every edit is checked by a real Flink restore, never only by our own reader").
//
//   java -cp <build>:<flink jars> RestoreCheck LABEL=SAVEPOINT,BACKEND,USER_UID,WINDOWS_UID[,BOOTSTRAPPED_UID] [...]
//   java -cp <build>:<flink jars> RestoreCheck LABEL=SAVEPOINT,BACKEND,job:types,TYPES_UID [...]
//
// The second form restores into the "types" job of ProductionFixtures (POJOs, Rows, Tuples, collections,
// java.time, BigDecimal, TTL states; every state declared as TypesFunction declares it) and prints every entry
// with Expect.enc, the encoding EXPECTED.json holds; a TTL state's entries carry "last_access" (read from the
// state under the TTL wrapper, so nothing is hidden as expired).
//
// Each case restores SAVEPOINT (without allowNonRestoredState) into the "plain" job of ProductionFixtures
// (same source chain and uids, same state descriptors and types) on BACKEND (hashmap or rocksdb), with
// the user-activity operator under USER_UID and the category-windows operator under WINDOWS_UID ("-": the
// operator is left out of the job). The keyed operators are replaced by ones that, once restored, print
// every entry of their states and timers as JSON lines "STATE <label> {...}" (schema: tools/flink/README.md),
// then the job is cancelled once the source has emitted its first number, printed as "FIRST <label> <n>" (where
// the restored split resumes). "RESTORED <label>" closes a case that restored, "FAILED <label> <exception class>:
// <message>" (the innermost cause) one that did not. USER_UID may end in "+without:STATE" for a job version that
// no longer declares that keyed state of user-activity (what Flink does with it: compatible()'s rule), or in
// "+without:long-total" for one that declares "total" with String instead of Long values, or in "+without:stats-v2"
// for one whose Stats POJO gained a field (src/stats-v2, shipped as the job's user jar; only "stats" declared). SAVEPOINT "new:DIR"
// restores nothing: the job version is started empty and stopped with a canonical savepoint under DIR, printed
// as "SAVED <label> <path>" (the new side explorer.compatible is given; tests/edit/test_flink_restore.py). No max parallelism is set, so the job takes the savepoint's.
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.state.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ReducingState;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.runtime.state.KeyedStateBackend;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.internal.InternalAggregatingState;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.InternalTimer;
import org.apache.flink.streaming.api.operators.InternalTimerService;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.operators.Triggerable;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.util.Collector;

public class RestoreCheck {
    static volatile CountDownLatch dumped;
    static volatile String label;
    static final java.util.Set<String> FIRST = java.util.concurrent.ConcurrentHashMap.newKeySet();

    static synchronized void out(String uid, String state, Object key, String ns, Object userKey, String value) {
        System.out.println("STATE " + label + " {\"operator\": " + json(uid) + ", \"state\": " + json(state) + ", \"key\": "
                + json(key) + ", \"namespace\": " + ns + ", \"user_key\": " + json(userKey) + ", \"value\": " + value + "}");
    }

    static synchronized void outTtl(String uid, String state, Object key, Object userKey, String value, long lastAccess) {
        System.out.println("STATE " + label + " {\"operator\": " + json(uid) + ", \"state\": " + json(state) + ", \"key\": "
                + json(key) + ", \"namespace\": null, \"user_key\": " + Expect.enc(userKey) + ", \"value\": " + value
                + ", \"last_access\": " + lastAccess + "}");
    }

    /** Checks, by Flink's own KeyGroupRangeAssignment, that key k belongs to this subtask's key groups (a key moved
     *  to a wrong key group would be found by getKeys but not by its lookup): prints "KEYGROUP label uid maxP kg
     *  OK|WRONG key" once per key. */
    static synchronized void keyGroup(String uid, Object key, AbstractStreamOperator<?> op) {
        int maxP = op.getRuntimeContext().getTaskInfo().getMaxNumberOfParallelSubtasks();
        int kg = org.apache.flink.runtime.state.KeyGroupRangeAssignment.assignToKeyGroup(key, maxP);
        org.apache.flink.api.common.TaskInfo task = op.getRuntimeContext().getTaskInfo();
        boolean mine = org.apache.flink.runtime.state.KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(
                maxP, task.getNumberOfParallelSubtasks(), task.getIndexOfThisSubtask()).contains(kg);
        System.out.println("KEYGROUP " + label + " " + uid + " " + maxP + " " + kg + " " + (mine ? "OK " : "WRONG ") + json(key));
    }

    static String json(Object o) {
        if (o == null) return "null";
        if (o instanceof Number) return o.toString();
        StringBuilder b = new StringBuilder("\"");
        for (char c : o.toString().toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String window(TimeWindow w) {
        return "{\"type\": \"time_window\", \"start\": " + w.getStart() + ", \"end\": " + w.getEnd() + "}";
    }

    /** Prints the restored state of one keyed operator of the plain job in open(), then idles. */
    public static class Dump extends AbstractStreamOperator<String>
            implements OneInputStreamOperator<ProductionFixtures.Event, String>, Triggerable<String, Object> {
        final String uid;
        final boolean windows;

        final boolean bootstrapped;
        final List<String> without;

        Dump(String uid, boolean windows) { this(uid, windows, false); }

        Dump(String uid, boolean windows, boolean bootstrapped) {
            String[] parts = uid.split("\\+without:", 2);
            this.uid = parts[0]; this.windows = windows; this.bootstrapped = bootstrapped;
            this.without = parts.length > 1 ? List.of(parts[1].split(":")) : List.of();
        }

        @Override
        public void open() throws Exception {
            super.open();
            if (bootstrapped) dumpBootstrapped(); else if (windows) dumpWindows(); else dumpUser();
            dumped.countDown();
        }

        @SuppressWarnings("unchecked")
        void dumpUser() throws Exception {
            KeyedStateBackend<String> kb = (KeyedStateBackend<String>) (KeyedStateBackend<?>) getKeyedStateBackend();
            if (without.contains("stats-v2")) {  // the next Stats (a field added), from the user jar: printed by reflection
                dumpStatsV2(kb);
                return;
            }
            ValueState<ProductionFixtures.Stats> stats = getPartitionedState(
                    new ValueStateDescriptor<>("stats", ProductionFixtures.Stats.class));
            ListState<Long> amounts = getPartitionedState(new ListStateDescriptor<>("amounts", Types.LONG));
            MapState<String, Long> perCat = getPartitionedState(
                    new MapStateDescriptor<>("per_category", Types.STRING, Types.LONG));
            // "USER_UID+without:total": a new job version that no longer declares the reducing state "total"
            boolean withTotal = !without.contains("total");
            // "USER_UID+without:long-total": a new job version that declares "total" with String values instead of
            // Long ones (an incompatible serializer: Flink refuses the restore with a StateMigrationException)
            if (without.contains("long-total")) {
                withTotal = false;
                getPartitionedState(new ReducingStateDescriptor<>("total", (String x, String y) -> x + y, Types.STRING));
            }
            ReducingState<Long> total = withTotal
                    ? getPartitionedState(new ReducingStateDescriptor<>("total", Long::sum, Types.LONG)) : null;
            TreeSet<String> keys = new TreeSet<>();
            for (String s : withTotal ? new String[] {"stats", "amounts", "per_category", "total"}
                                      : new String[] {"stats", "amounts", "per_category"}) {
                try (Stream<String> ks = kb.getKeys(s, VoidNamespace.INSTANCE)) { keys.addAll(ks.collect(Collectors.toList())); }
            }
            for (String k : keys) {
                setCurrentKey(k);
                keyGroup(uid, k, this);
                ProductionFixtures.Stats st = stats.value();
                if (st != null) {
                    out(uid, "stats", k, "null", null, "{\"type\": \"pojo\", \"class\": \"ProductionFixtures$Stats\", \"fields\": "
                            + "{\"count\": " + st.count + ", \"lastCategory\": " + json(st.lastCategory) + ", \"total\": " + st.total + "}}");
                }
                int i = 0;
                Iterable<Long> as = amounts.get();
                if (as != null) for (Long a : as) out(uid, "amounts", k, "null", i++, json(a));
                for (Map.Entry<String, Long> e : perCat.entries()) out(uid, "per_category", k, "null", e.getKey(), json(e.getValue()));
                Long t = withTotal ? total.get() : null;
                if (t != null) out(uid, "total", k, "null", null, json(t));
            }
            InternalTimerService<VoidNamespace> timers = getInternalTimerService("user-timers", VoidNamespaceSerializer.INSTANCE, (Triggerable<String, VoidNamespace>) (Triggerable<?, ?>) this);
            timers.forEachEventTimeTimer((ns, ts) -> out(uid, "_timer_state/event_user-timers", getCurrentKey(), "null", null, json(ts)));
            timers.forEachProcessingTimeTimer((ns, ts) -> out(uid, "_timer_state/processing_user-timers", getCurrentKey(), "null", null, json(ts)));
        }

        /** "+without:stats-v2": a job version whose Stats POJO gained a field (tools/flink/src/stats-v2, shipped as the
         *  user jar, which Flink's child-first class loader prefers): declares only "stats", with that class, and
         *  prints its values as the plain job does (the savepoint's other states are restored unused). */
        @SuppressWarnings({"unchecked", "rawtypes"})
        void dumpStatsV2(KeyedStateBackend<String> kb) throws Exception {
            Class<?> cls = Class.forName("ProductionFixtures$Stats", true, getRuntimeContext().getUserCodeClassLoader());
            if (cls == ProductionFixtures.Stats.class) throw new IllegalStateException("stats-v2: the user jar's Stats was not loaded");
            ValueState<Object> stats = (ValueState<Object>) getPartitionedState(new ValueStateDescriptor("stats", (Class) cls));
            TreeSet<String> keys = new TreeSet<>();
            try (Stream<String> ks = kb.getKeys("stats", VoidNamespace.INSTANCE)) { keys.addAll(ks.collect(Collectors.toList())); }
            for (String k : keys) {
                setCurrentKey(k);
                Object st = stats.value();
                if (st == null) continue;
                if (cls.getField("tier").get(st) != null) throw new IllegalStateException("stats-v2: the added field is not null");
                out(uid, "stats", k, "null", null, "{\"type\": \"pojo\", \"class\": \"ProductionFixtures$Stats\", \"fields\": "
                        + "{\"count\": " + cls.getField("count").get(st) + ", \"lastCategory\": " + json(cls.getField("lastCategory").get(st))
                        + ", \"total\": " + cls.getField("total").get(st) + "}}");
            }
        }

        /** The states explorer.edit's bootstrap writes for a new operator keyed by user: limit (Long), label (String),
     *  history (List of Integer), flags (Map String to String); and its operator state. */
        @SuppressWarnings("unchecked")
        void dumpBootstrapped() throws Exception {
            KeyedStateBackend<String> kb = (KeyedStateBackend<String>) (KeyedStateBackend<?>) getKeyedStateBackend();
            ValueState<Long> limit = getPartitionedState(new ValueStateDescriptor<>("limit", Types.LONG));
            ValueState<String> tag = getPartitionedState(new ValueStateDescriptor<>("label", Types.STRING));
            ListState<Integer> history = getPartitionedState(new ListStateDescriptor<>("history", Types.INT));
            MapState<String, String> flags = getPartitionedState(new MapStateDescriptor<>("flags", Types.STRING, Types.STRING));
            TreeSet<String> keys = new TreeSet<>();
            for (String s : new String[] {"limit", "label", "history", "flags"}) {
                try (Stream<String> ks = kb.getKeys(s, VoidNamespace.INSTANCE)) { keys.addAll(ks.collect(Collectors.toList())); }
            }
            for (String k : keys) {
                setCurrentKey(k);
                keyGroup(uid, k, this);
                Long l = limit.value();
                if (l != null) out(uid, "limit", k, "null", null, json(l));
                String t = tag.value();
                if (t != null) out(uid, "label", k, "null", null, json(t));
                int j = 0;
                Iterable<Integer> hs = history.get();
                if (hs != null) for (Integer h : hs) out(uid, "history", k, "null", j++, json(h));
                for (Map.Entry<String, String> e : flags.entries()) out(uid, "flags", k, "null", e.getKey(), json(e.getValue()));
            }
            // operator state explorer.edit's set_operator_state wrote: key = the subtask, user key = the position
            int sub = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
            int i = 0;
            for (String n : getOperatorStateBackend().getListState(new ListStateDescriptor<>("names", Types.STRING)).get()) {
                out(uid, "op:names", sub, "null", i++, json(n));
            }
            i = 0;
            for (Long n : getOperatorStateBackend().getUnionListState(new ListStateDescriptor<>("everyone", Types.LONG)).get()) {
                out(uid, "op:everyone", sub, "null", i++, json(n));
            }
            i = 0;
            for (String n : getOperatorStateBackend().getUnionListState(new ListStateDescriptor<>("extra", Types.STRING)).get()) {
                out(uid, "op:extra", sub, "null", i++, json(n));  // (set by a second edit, next to the held states)
            }
            for (Map.Entry<String, Long> e : getOperatorStateBackend().getBroadcastState(
                    new MapStateDescriptor<>("rules", Types.STRING, Types.LONG)).entries()) {
                out(uid, "op:rules", sub, "null", e.getKey(), json(e.getValue()));
            }
        }

        @SuppressWarnings("unchecked")
        void dumpWindows() throws Exception {
            KeyedStateBackend<String> kb = (KeyedStateBackend<String>) (KeyedStateBackend<?>) getKeyedStateBackend();
            AggregatingStateDescriptor<ProductionFixtures.Event, Long, Long> d = new AggregatingStateDescriptor<>(
                    "window-contents", new ProductionFixtures.CountAgg(), Types.LONG);
            InternalAggregatingState<String, TimeWindow, ProductionFixtures.Event, Long, Long> contents =
                    (InternalAggregatingState<String, TimeWindow, ProductionFixtures.Event, Long, Long>)
                            getOrCreateKeyedState(new TimeWindow.Serializer(), d);
            List<Tuple2<String, TimeWindow>> kns;
            try (Stream<Tuple2<String, TimeWindow>> s = kb.getKeysAndNamespaces("window-contents")) { kns = s.collect(Collectors.toList()); }
            TreeSet<String> seen = new TreeSet<>();
            for (Tuple2<String, TimeWindow> kn : kns) {
                setCurrentKey(kn.f0);
                if (seen.add(kn.f0)) keyGroup(uid, kn.f0, this);
                contents.setCurrentNamespace(kn.f1);
                Long acc = contents.getInternal();
                if (acc != null) out(uid, "window-contents", kn.f0, window(kn.f1), null, json(acc));
            }
            InternalTimerService<TimeWindow> timers = getInternalTimerService("window-timers", new TimeWindow.Serializer(), (Triggerable<String, TimeWindow>) (Triggerable<?, ?>) this);
            timers.forEachEventTimeTimer((w, ts) -> out(uid, "_timer_state/event_window-timers", getCurrentKey(), window(w), null, json(ts)));
            timers.forEachProcessingTimeTimer((w, ts) -> out(uid, "_timer_state/processing_window-timers", getCurrentKey(), window(w), null, json(ts)));
        }

        @Override public void processElement(StreamRecord<ProductionFixtures.Event> element) {}
        @Override public void onEventTime(InternalTimer<String, Object> timer) {}
        @Override public void onProcessingTime(InternalTimer<String, Object> timer) {}
    }

    /** Prints the restored state of the types job's operator (TypesFunction's states, its timers) in open(). */
    public static class TypesDump extends AbstractStreamOperator<String>
            implements OneInputStreamOperator<ProductionFixtures.Event, String>, Triggerable<String, Object> {
        final String uid;

        TypesDump(String uid) { this.uid = uid; }

        @SuppressWarnings({"unchecked", "rawtypes"})
        <S> S state(org.apache.flink.api.common.state.StateDescriptor d) throws Exception {
            return (S) getPartitionedState(d);
        }

        /** The state under its TTL wrapper (AbstractTtlDecorator.original): values with their last access. */
        static Object original(Object ttlState) throws Exception {
            java.lang.reflect.Field f = Class.forName("org.apache.flink.runtime.state.ttl.AbstractTtlDecorator")
                    .getDeclaredField("original");
            f.setAccessible(true);
            return f.get(ttlState);
        }

        static org.apache.flink.api.common.state.StateTtlConfig longTtl() {
            return ProductionFixtures.ttl(java.time.Duration.ofDays(36500));  // (a TTL's length may change on restore)
        }

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void open() throws Exception {
            super.open();
            KeyedStateBackend<String> kb = (KeyedStateBackend<String>) (KeyedStateBackend<?>) getKeyedStateBackend();
            Object[][] values = {
                    {"profile", TypeInformation.of(ProductionFixtures.Profile.class)},
                    {"basket", TypeInformation.of(ProductionFixtures.Basket.class)},
                    {"tier", TypeInformation.of(ProductionFixtures.Tier.class)},
                    {"first_seen", Types.INSTANT}, {"last_local", Types.LOCAL_DATE_TIME}, {"day", Types.LOCAL_DATE},
                    {"legacy_date", TypeInformation.of(java.util.Date.class)}, {"sql_ts", Types.SQL_TIMESTAMP},
                    {"spend", Types.BIG_DEC}, {"big", Types.BIG_INT},
                    {"row", Types.ROW_NAMED(new String[] {"city", "visits", "score"}, Types.STRING, Types.LONG, Types.DOUBLE)},
                    {"maybe", TypeInformation.of(new org.apache.flink.api.common.typeinfo.TypeHint<java.util.Optional<String>>() {})},
                    {"either", TypeInformation.of(new org.apache.flink.api.common.typeinfo.TypeHint<org.apache.flink.types.Either<String, Long>>() {})},
                    {"long_array", Types.PRIMITIVE_ARRAY(Types.LONG)}, {"names_array", Types.OBJECT_ARRAY(Types.STRING)},
                    {"bytes", Types.PRIMITIVE_ARRAY(Types.BYTE)}, {"list_value", Types.LIST(Types.LONG)},
                    {"map_value", Types.MAP(Types.STRING, Types.LONG)},
                    {"kryo", TypeInformation.of(ProductionFixtures.LegacyThing.class)},
                    {"tuple", Types.TUPLE(Types.INT, Types.BOOLEAN, Types.CHAR)},
            };
            Map<String, ValueState> vs = new java.util.LinkedHashMap<>();
            for (Object[] v : values) vs.put((String) v[0], state(new ValueStateDescriptor((String) v[0], (TypeInformation) v[1])));
            ValueStateDescriptor<Long> tvd = new ValueStateDescriptor<>("ttl_value", Types.LONG);
            tvd.enableTimeToLive(longTtl());
            ListStateDescriptor<String> tld = new ListStateDescriptor<>("ttl_list", Types.STRING);
            tld.enableTimeToLive(longTtl());
            MapStateDescriptor<String, Long> tmd = new MapStateDescriptor<>("ttl_map", Types.STRING, Types.LONG);
            tmd.enableTimeToLive(longTtl());
            ValueState<org.apache.flink.runtime.state.ttl.TtlValue<Long>> ttlValue = (ValueState) original(state(tvd));
            ListState<org.apache.flink.runtime.state.ttl.TtlValue<String>> ttlList = (ListState) original(state(tld));
            MapState<String, org.apache.flink.runtime.state.ttl.TtlValue<Long>> ttlMap = (MapState) original(state(tmd));
            MapState<java.time.LocalDate, Long> byDay = state(new MapStateDescriptor<>("by_day", Types.LOCAL_DATE, Types.LONG));
            ListState<java.time.Instant> visitTimes = state(new ListStateDescriptor<>("visit_times", Types.INSTANT));
            TreeSet<String> keys = new TreeSet<>();
            List<String> names = new java.util.ArrayList<>(vs.keySet());
            names.addAll(List.of("ttl_value", "ttl_list", "ttl_map", "by_day", "visit_times"));
            for (String s : names) {
                try (Stream<String> ks = kb.getKeys(s, VoidNamespace.INSTANCE)) { keys.addAll(ks.collect(Collectors.toList())); }
            }
            for (String k : keys) {
                setCurrentKey(k);
                keyGroup(uid, k, this);
                for (Map.Entry<String, ValueState> e : vs.entrySet()) {
                    Object v = e.getValue().value();
                    if (v instanceof org.apache.flink.types.Row && ((org.apache.flink.types.Row) v).getFieldNames(false) == null) {
                        // a restored Row is positional: named as the job's type names its fields (as EXPECTED shows it)
                        org.apache.flink.types.Row r = (org.apache.flink.types.Row) v, named = org.apache.flink.types.Row.withNames(r.getKind());
                        String[] fieldNames = {"city", "visits", "score"};
                        for (int i = 0; i < fieldNames.length; i++) named.setField(fieldNames[i], r.getField(i));
                        v = named;
                    }
                    if (v != null) out(uid, e.getKey(), k, "null", null, Expect.enc(v));
                }
                org.apache.flink.runtime.state.ttl.TtlValue<Long> tv = ttlValue.value();
                if (tv != null) outTtl(uid, "ttl_value", k, null, Expect.enc(tv.getUserValue()), tv.getLastAccessTimestamp());
                int i = 0;
                Iterable<org.apache.flink.runtime.state.ttl.TtlValue<String>> tl = ttlList.get();
                if (tl != null) for (org.apache.flink.runtime.state.ttl.TtlValue<String> t : tl) {
                    outTtl(uid, "ttl_list", k, i++, Expect.enc(t.getUserValue()), t.getLastAccessTimestamp());
                }
                for (Map.Entry<String, org.apache.flink.runtime.state.ttl.TtlValue<Long>> e : ttlMap.entries()) {
                    outTtl(uid, "ttl_map", k, e.getKey(), Expect.enc(e.getValue().getUserValue()), e.getValue().getLastAccessTimestamp());
                }
                for (Map.Entry<java.time.LocalDate, Long> e : byDay.entries()) {
                    System.out.println("STATE " + label + " {\"operator\": " + json(uid) + ", \"state\": \"by_day\", \"key\": "
                            + json(k) + ", \"namespace\": null, \"user_key\": " + Expect.enc(e.getKey()) + ", \"value\": "
                            + Expect.enc(e.getValue()) + "}");
                }
                i = 0;
                Iterable<java.time.Instant> times = visitTimes.get();
                if (times != null) for (java.time.Instant t : times) out(uid, "visit_times", k, "null", i++, Expect.enc(t));
            }
            InternalTimerService<VoidNamespace> timers = getInternalTimerService("user-timers", VoidNamespaceSerializer.INSTANCE, (Triggerable<String, VoidNamespace>) (Triggerable<?, ?>) this);
            timers.forEachEventTimeTimer((ns, ts) -> out(uid, "_timer_state/event_user-timers", getCurrentKey(), "null", null, json(ts)));
            timers.forEachProcessingTimeTimer((ns, ts) -> out(uid, "_timer_state/processing_user-timers", getCurrentKey(), "null", null, json(ts)));
            dumped.countDown();
        }

        @Override public void processElement(StreamRecord<ProductionFixtures.Event> element) {}
        @Override public void onEventTime(InternalTimer<String, Object> timer) {}
        @Override public void onProcessingTime(InternalTimer<String, Object> timer) {}
    }

    public static void main(String[] args) {
        int failed = 0;
        try {
            for (String arg : args) failed += run(arg) ? 0 : 1;
        } catch (Throwable t) {
            t.printStackTrace();
            System.exit(1);
        }
        System.exit(failed == 0 ? 0 : 3);  // (the mini cluster's threads would keep the JVM up)
    }

    /** "<class of the innermost cause>: <its message>", on one line: what a FAILED line reports. */
    static String rootCause(Throwable t) {
        while (t.getCause() != null && t.getCause() != t) t = t.getCause();
        return t.toString().replace('\n', ' ');
    }

    static boolean run(String spec) throws Exception {
        String[] lv = spec.split("=", 2);
        String[] a = lv[1].split(",");
        label = lv[0];
        String savepoint = a[0], backend = a[1], userUid = a[2], windowsUid = a[3];
        // SAVEPOINT "new:DIR": no restore; the job starts empty and, once its operators have declared their states,
        // is stopped with a canonical savepoint under DIR ("SAVED <label> <path>"): the new job version's own
        // savepoint, which explorer.compatible compares with the old one
        String saveTo = savepoint.startsWith("new:") ? savepoint.substring(4) : null;
        Path work = Files.createTempDirectory("restore-check");
        Map<String, String> conf = new HashMap<>();
        conf.put("state.backend.type", backend);
        conf.put("state.backend", backend);
        if (userUid.contains("+without:stats-v2")) {  // the job version's own classes: its next Stats
            conf.put("pipeline.jars", Path.of(System.getProperty("restorecheck.statsV2")).toUri().toString());
            conf.put("classloader.resolve-order", "child-first");
        }
        if (saveTo == null) {
            conf.put("execution.state-recovery.path", savepoint);
            conf.put("execution.savepoint.path", savepoint);
        }
        conf.put("execution.state-recovery.ignore-unclaimed-state", "false");
        conf.put("execution.checkpointing.dir", work.resolve("checkpoints").toUri().toString());
        conf.put("taskmanager.numberOfTaskSlots", "8");
        conf.put("rest.bind-port", "0");
        conf.put("state.backend.rocksdb.memory.managed", "true");
        conf.put("taskmanager.memory.managed.size", "256m");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        env.setParallelism(2);
        final String caseLabel = label;
        DataStream<ProductionFixtures.Event> stream = env.fromSequence(0, Long.MAX_VALUE).setParallelism(1).uid("sequence").name("sequence")
                .flatMap((Long i, Collector<ProductionFixtures.Event> o) -> {
                    // the number the restored source split resumes from (once per case: a cancelled case's job may
                    // still emit while the next one runs, under its own label)
                    if (FIRST.add(caseLabel)) {
                        System.out.println("FIRST " + caseLabel + " " + i);
                        dumped.countDown();
                    }
                    Thread.sleep(20);
                })
                .returns(TypeInformation.of(ProductionFixtures.Event.class)).setParallelism(1).uid("events").name("events")
                .assignTimestampsAndWatermarks(WatermarkStrategy.<ProductionFixtures.Event>noWatermarks().withTimestampAssigner((e, t) -> e.ts))
                .setParallelism(1).uid("timestamps").name("timestamps");
        int operators = 0;
        if (userUid.equals("job:types")) {  // the types job: its one keyed operator under uid WINDOWS_UID's place
            stream.keyBy(e -> e.user, Types.STRING).transform("user-types", Types.STRING, new TypesDump(windowsUid)).uid(windowsUid);
            operators++;
            userUid = windowsUid = "-";
        }
        if (!userUid.equals("-")) {
            stream.keyBy(e -> e.user, Types.STRING).transform("user-activity", Types.STRING, new Dump(userUid, false))
                    .uid(userUid.split("\\+", 2)[0]);
            operators++;
        }
        if (!windowsUid.equals("-")) {
            stream.keyBy(e -> e.category, Types.STRING).transform("category-windows", Types.STRING, new Dump(windowsUid, true)).uid(windowsUid);
            operators++;
        }
        String bootUid = a.length > 4 ? a[4] : "-";
        if (!bootUid.equals("-")) {  // a new operator whose state explorer.edit bootstrapped
            stream.keyBy(e -> e.user, Types.STRING).transform("bootstrapped", Types.STRING, new Dump(bootUid, false, true)).uid(bootUid);
            operators++;
        }
        dumped = new CountDownLatch(2 * operators + 1);  // every dump, and the source's first number
        JobClient client;
        try {
            client = env.executeAsync("restore-check-" + label);
        } catch (Exception e) {  // a restore refused at submission: the outcome of this case, not of the run
            System.out.println("FAILED " + label + " " + rootCause(e));
            return false;
        }
        long deadline = System.currentTimeMillis() + 180_000;
        while (!dumped.await(200, TimeUnit.MILLISECONDS)) {
            if (client.getJobExecutionResult().isDone() || System.currentTimeMillis() > deadline) {
                String why = "timed out";
                try { client.getJobExecutionResult().get(1, TimeUnit.SECONDS); } catch (Exception e) {
                    why = rootCause(e);
                }
                System.out.println("FAILED " + label + " " + why);
                try { client.cancel().get(30, TimeUnit.SECONDS); } catch (Exception ignored) {}
                return false;
            }
        }
        if (saveTo != null) {
            // (open() has run, but a task only counts as running for a savepoint a moment later: retried)
            for (int attempt = 1; ; attempt++) {
                try {
                    String path = client.stopWithSavepoint(false, saveTo,
                            org.apache.flink.core.execution.SavepointFormatType.CANONICAL).get(120, TimeUnit.SECONDS);
                    System.out.println("SAVED " + label + " " + path);
                    return true;
                } catch (Exception e) {
                    if (attempt == 20 || client.getJobExecutionResult().isDone()) {
                        System.out.println("FAILED " + label + " " + rootCause(e));
                        try { client.cancel().get(30, TimeUnit.SECONDS); } catch (Exception ignored) {}
                        return false;
                    }
                    Thread.sleep(250);
                }
            }
        }
        System.out.println("RESTORED " + label);
        client.cancel().get(60, TimeUnit.SECONDS);
        return true;
    }
}
