// The peer row of benchmarks/bench_flink_reader.py: Apache Flink's own State Processor API (SavepointReader)
// reading the same snapshot's keyed state, one record per state entry, counted.
//
// Usage: SpaReadBench <snapshot-dir> <fixtures|types|scale> <hashmap|rocksdb> [parallelism]
//
//   fixtures: the StateFixtures job (tools/flink/src/StateFixtures.java; "user-state", "bucket-state",
//             "user-windows"); StateFixtures' classes (its UserStats POJO) must be on the classpath.
//   types:    the ProductionFixtures "types" job ("user-types", 25 states of POJOs, Rows, Kryo, java.time...);
//             the job's jar (bench-types-job.jar) must be on the classpath.
//   scale:    tools/flink/src/ScaleSavepoints.java ("user-profiles": a POJO, a Long, a map per key).
//
// A record per entry, as the explorer makes a row per entry: a value state's value, each element of a list
// state, each entry of a map state, each registered timer, each window's contents. Every value is read (so
// deserialized) by the state backend's own accessors. The job classes are loaded by name, so this file
// compiles against Flink and the State Processor API only.
//
// Prints one JSON line: rows, rows per state, the read's wall and CPU seconds inside the JVM (from just before
// SavepointReader.read to the end of the job), and the JVM's uptime when the read began (its start-up cost).
import java.io.Serializable;
import java.lang.management.ManagementFactory;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicLongArray;

import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ReducingState;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.StateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.SavepointReader;
import org.apache.flink.state.api.functions.KeyedStateReaderFunction;
import org.apache.flink.state.api.functions.WindowReaderFunction;
import org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.types.Either;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

public class SpaReadBench {

    /** Entries counted per state (index into NAMES); the sink runs in this JVM (a local mini cluster). */
    static final int MAX_STATES = 64;
    static final AtomicLongArray COUNTS = new AtomicLongArray(MAX_STATES);
    static final List<String> NAMES = new ArrayList<>();

    enum Kind { VALUE, LIST, MAP, REDUCING }

    /** One state of an operator as the job declared it (name, kind, types, TTL or not). */
    static final class Spec implements Serializable {
        final String name;
        final Kind kind;
        final TypeInformation<?> type;
        final TypeInformation<?> valueType; // map values
        final boolean ttl;
        int index;

        Spec(String name, Kind kind, TypeInformation<?> type, TypeInformation<?> valueType, boolean ttl) {
            this.name = name;
            this.kind = kind;
            this.type = type;
            this.valueType = valueType;
            this.ttl = ttl;
        }
    }

    static Spec value(String n, TypeInformation<?> t) { return new Spec(n, Kind.VALUE, t, null, false); }
    static Spec list(String n, TypeInformation<?> t) { return new Spec(n, Kind.LIST, t, null, false); }
    static Spec map(String n, TypeInformation<?> k, TypeInformation<?> v) { return new Spec(n, Kind.MAP, k, v, false); }
    static Spec ttl(Spec s) { return new Spec(s.name, s.kind, s.type, s.valueType, true); }

    static int register(String name) {
        NAMES.add(name);
        if (NAMES.size() > MAX_STATES) throw new IllegalStateException("too many states");
        return NAMES.size() - 1;
    }

    /** A TTL state read as restored: expired values still returned, nothing cleaned up while reading. */
    static StateTtlConfig readTtl() {
        return StateTtlConfig.newBuilder(Duration.ofDays(3650)).updateTtlOnCreateAndWrite()
                .returnExpiredIfNotCleanedUp().disableCleanupInBackground().build();
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static StateDescriptor<?, ?> descriptor(Spec s) {
        StateDescriptor d;
        switch (s.kind) {
            case VALUE: d = new ValueStateDescriptor(s.name, s.type); break;
            case LIST: d = new ListStateDescriptor(s.name, s.type); break;
            case MAP: d = new MapStateDescriptor(s.name, s.type, s.valueType); break;
            default: d = new ReducingStateDescriptor(s.name, (a, b) -> a, s.type); break;
        }
        if (s.ttl) d.enableTimeToLive(readTtl());
        return d;
    }

    /** Reads every state of one keyed operator for each key: one record (the state's index) per entry. */
    public static class EntryReader<K> extends KeyedStateReaderFunction<K, Integer> {
        final List<Spec> specs;
        final int eventTimers;
        final int processingTimers;
        transient List<Object> states;

        EntryReader(List<Spec> specs, int eventTimers, int processingTimers) {
            this.specs = specs;
            this.eventTimers = eventTimers;
            this.processingTimers = processingTimers;
        }

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void open(OpenContext ctx) {
            states = new ArrayList<>();
            for (Spec s : specs) {
                StateDescriptor d = descriptor(s);
                switch (s.kind) {
                    case VALUE: states.add(getRuntimeContext().getState((ValueStateDescriptor) d)); break;
                    case LIST: states.add(getRuntimeContext().getListState((ListStateDescriptor) d)); break;
                    case MAP: states.add(getRuntimeContext().getMapState((MapStateDescriptor) d)); break;
                    default: states.add(getRuntimeContext().getReducingState((ReducingStateDescriptor) d)); break;
                }
            }
        }

        @Override
        @SuppressWarnings("rawtypes")
        public void readKey(K key, Context ctx, Collector<Integer> out) throws Exception {
            for (int i = 0; i < specs.size(); i++) {
                Spec s = specs.get(i);
                Object st = states.get(i);
                switch (s.kind) {
                    case VALUE:
                        if (((ValueState) st).value() != null) out.collect(s.index);
                        break;
                    case REDUCING:
                        if (((ReducingState) st).get() != null) out.collect(s.index);
                        break;
                    case LIST: {
                        Iterable it = (Iterable) ((ListState) st).get();
                        if (it != null) for (Object o : it) out.collect(s.index);
                        break;
                    }
                    default: {
                        Iterable<Map.Entry> it = ((MapState) st).entries();
                        if (it != null) for (Map.Entry e : it) { e.getValue(); out.collect(s.index); }
                    }
                }
            }
            if (eventTimers >= 0) for (Long t : ctx.registeredEventTimeTimers()) out.collect(eventTimers);
            if (processingTimers >= 0) for (Long t : ctx.registeredProcessingTimeTimers()) out.collect(processingTimers);
        }
    }

    /** The fixture job's window aggregate (a Long count per key and window); its accumulator is the state. */
    public static class CountAgg implements AggregateFunction<Object, Long, Long> {
        public Long createAccumulator() { return 0L; }
        public Long add(Object e, Long acc) { return acc + 1; }
        public Long getResult(Long acc) { return acc; }
        public Long merge(Long a, Long b) { return a + b; }
    }

    /** One record per window's contents and one per window timer. */
    public static class WindowEntries extends WindowReaderFunction<Long, Integer, String, TimeWindow> {
        final int contents;
        final int timers;

        WindowEntries(int contents, int timers) {
            this.contents = contents;
            this.timers = timers;
        }

        @Override
        public void readWindow(String key, Context<TimeWindow> ctx, Iterable<Long> elements, Collector<Integer> out)
                throws Exception {
            for (Long v : elements) out.collect(contents);
            for (Long t : ctx.registeredEventTimeTimers()) out.collect(timers);
        }
    }

    /** Counts records per state index into COUNTS (the mini cluster runs in this JVM). */
    public static class CountingSink implements Sink<Integer> {
        @Override
        public SinkWriter<Integer> createWriter(WriterInitContext context) {
            return new SinkWriter<Integer>() {
                final long[] local = new long[MAX_STATES];

                public void write(Integer i, Context c) { local[i]++; }

                public void flush(boolean endOfInput) {
                    for (int i = 0; i < MAX_STATES; i++) {
                        if (local[i] != 0) { COUNTS.addAndGet(i, local[i]); local[i] = 0; }
                    }
                }

                public void close() { flush(true); }
            };
        }
    }

    static Class<?> job(String name) throws ClassNotFoundException {
        return Class.forName(name, false, SpaReadBench.class.getClassLoader());
    }

    static List<Spec> indexed(String op, List<Spec> specs) {
        for (Spec s : specs) s.index = register(op + "/" + s.name);
        return specs;
    }

    static DataStream<Integer> fixtures(SavepointReader sp) throws Exception {
        List<Spec> user = indexed("user-state", List.of(
                value("stats", TypeInformation.of(job("StateFixtures$UserStats"))),
                ttl(value("last_seen", Types.LONG)),
                value("first_event", TypeInformation.of(new TypeHint<org.apache.flink.api.java.tuple.Tuple2<String, Integer>>() {})),
                list("amounts", Types.LONG),
                ttl(list("recent_amounts", Types.LONG)),
                ttl(map("per_category", Types.STRING, Types.LONG))));
        int userEvent = register("user-state/_timer_state/event_user-timers");
        int userProc = register("user-state/_timer_state/processing_user-timers");
        List<Spec> bucket = indexed("bucket-state",
                List.of(new Spec("amount_sum", Kind.REDUCING, Types.LONG, null, false)));
        DataStream<Integer> a = sp.readKeyedState(OperatorIdentifier.forUid("user-state"),
                new EntryReader<String>(user, userEvent, userProc), Types.STRING, Types.INT);
        DataStream<Integer> b = sp.readKeyedState(OperatorIdentifier.forUid("bucket-state"),
                new EntryReader<Long>(bucket, -1, -1), Types.LONG, Types.INT);
        int contents = register("user-windows/window-contents");
        int wtimers = register("user-windows/_timer_state/event_window-timers");
        DataStream<Integer> c = sp.window(TumblingEventTimeWindows.of(Duration.ofMillis(30_000)))
                .aggregate("user-windows", new CountAgg(), new WindowEntries(contents, wtimers),
                        Types.STRING, Types.LONG, Types.INT);
        return a.union(b, c);
    }

    static DataStream<Integer> types(SavepointReader sp) throws Exception {
        List<Spec> specs = indexed("user-types", List.of(
                value("profile", TypeInformation.of(job("ProductionFixtures$Profile"))),
                value("basket", TypeInformation.of(job("ProductionFixtures$Basket"))),
                value("tier", TypeInformation.of(job("ProductionFixtures$Tier"))),
                value("first_seen", Types.INSTANT),
                value("last_local", Types.LOCAL_DATE_TIME),
                value("day", Types.LOCAL_DATE),
                value("legacy_date", TypeInformation.of(java.util.Date.class)),
                value("sql_ts", Types.SQL_TIMESTAMP),
                value("spend", Types.BIG_DEC),
                value("big", Types.BIG_INT),
                value("row", Types.ROW_NAMED(new String[] {"city", "visits", "score"},
                        Types.STRING, Types.LONG, Types.DOUBLE)),
                value("maybe", TypeInformation.of(new TypeHint<Optional<String>>() {})),
                value("either", TypeInformation.of(new TypeHint<Either<String, Long>>() {})),
                value("long_array", Types.PRIMITIVE_ARRAY(Types.LONG)),
                value("names_array", Types.OBJECT_ARRAY(Types.STRING)),
                value("bytes", Types.PRIMITIVE_ARRAY(Types.BYTE)),
                value("list_value", Types.LIST(Types.LONG)),
                value("map_value", Types.MAP(Types.STRING, Types.LONG)),
                value("kryo", TypeInformation.of(job("ProductionFixtures$LegacyThing"))),
                value("tuple", Types.TUPLE(Types.INT, Types.BOOLEAN, Types.CHAR)),
                ttl(value("ttl_value", Types.LONG)),
                ttl(list("ttl_list", Types.STRING)),
                ttl(map("ttl_map", Types.STRING, Types.LONG)),
                map("by_day", Types.LOCAL_DATE, Types.LONG),
                list("visit_times", Types.INSTANT)));
        int timers = register("user-types/_timer_state/event_user-timers");
        return sp.readKeyedState(OperatorIdentifier.forUid("user-types"),
                new EntryReader<String>(specs, timers, -1), Types.STRING, Types.INT);
    }

    static DataStream<Integer> scale(SavepointReader sp) throws Exception {
        List<Spec> specs = indexed("user-profiles", List.of(
                value("profile", TypeInformation.of(job("ScaleSavepoints$Profile"))),
                value("last_seen", Types.LONG),
                map("counters", Types.STRING, Types.LONG)));
        return sp.readKeyedState(OperatorIdentifier.forUid("user-profiles"),
                new EntryReader<String>(specs, -1, -1), Types.STRING, Types.INT);
    }

    public static void main(String[] args) throws Exception {
        String path = args[0];
        String jobName = args[1];
        String backend = args[2];
        int parallelism = args.length > 3 ? Integer.parseInt(args[3]) : 2;
        long uptimeAtStart = ManagementFactory.getRuntimeMXBean().getUptime();
        com.sun.management.OperatingSystemMXBean os =
                (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        long cpu0 = os.getProcessCpuTime();
        long t0 = System.nanoTime();

        Configuration conf = new Configuration();
        conf.setString("rest.bind-port", "0");
        conf.setString("taskmanager.numberOfTaskSlots", "8");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);
        SavepointReader sp = SavepointReader.read(env, path,
                backend.equals("rocksdb") ? new EmbeddedRocksDBStateBackend() : new HashMapStateBackend());
        DataStream<Integer> entries =
                jobName.equals("types") ? types(sp) : jobName.equals("scale") ? scale(sp) : fixtures(sp);
        entries.sinkTo(new CountingSink()).name("count");
        env.execute("spa-read-" + jobName);

        double seconds = (System.nanoTime() - t0) / 1e9;
        double cpu = (os.getProcessCpuTime() - cpu0) / 1e9;
        long rows = 0;
        StringBuilder per = new StringBuilder();
        for (int i = 0; i < NAMES.size(); i++) {
            rows += COUNTS.get(i);
            per.append(i == 0 ? "" : ", ").append('"').append(NAMES.get(i)).append("\": ").append(COUNTS.get(i));
        }
        System.out.println("{\"rows\": " + rows + ", \"per_state\": {" + per + "}, \"read_seconds\": " + seconds
                + ", \"read_cpu_seconds\": " + cpu + ", \"jvm_uptime_at_read_start_seconds\": "
                + uptimeAtStart / 1e3 + ", \"parallelism\": " + parallelism + "}");
        System.exit(0);
    }
}
