// The peer of benchmarks/bench_edit.py: Apache Flink's State Processor API doing the explorer's
// `explorer.edit(path).drop_keys(operator="user-profiles", keys=[hot]).write(out)` on a savepoint of
// tools/flink/src/ScaleSavepoints.java: read the operator's keyed state (SavepointReader), leave out one
// key, and write a new savepoint with the operator's state bootstrapped from what is left
// (SavepointWriter.fromExistingSavepoint(...).removeOperator(uid).withOperator(uid, ...).write(out)).
//
// Usage: SpaEditBench <savepoint-dir> <out-dir> <hot-key> [parallelism]
//
// Prints one JSON line: keys read, keys written, entries written (values and map entries), the edit's wall
// and CPU seconds inside the JVM, and the JVM's uptime when the edit began.
import java.lang.management.ManagementFactory;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.OperatorTransformation;
import org.apache.flink.state.api.SavepointReader;
import org.apache.flink.state.api.SavepointWriter;
import org.apache.flink.state.api.StateBootstrapTransformation;
import org.apache.flink.state.api.functions.KeyedStateBootstrapFunction;
import org.apache.flink.state.api.functions.KeyedStateReaderFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

public class SpaEditBench {

    static final String UID = "user-profiles";
    // the mini cluster runs in this JVM
    static final AtomicLong KEYS_READ = new AtomicLong();
    static final AtomicLong KEYS_WRITTEN = new AtomicLong();
    static final AtomicLong ENTRIES_WRITTEN = new AtomicLong();

    static ValueStateDescriptor<ScaleSavepoints.Profile> profile() {
        return new ValueStateDescriptor<>("profile", ScaleSavepoints.Profile.class);
    }

    static ValueStateDescriptor<Long> lastSeen() {
        return new ValueStateDescriptor<>("last_seen", Types.LONG);
    }

    static MapStateDescriptor<String, Long> counters() {
        return new MapStateDescriptor<>("counters", Types.STRING, Types.LONG);
    }

    /**
     * One row per key: (key, profile, last_seen, counters), absent states as null. Every key gives a row: in
     * this version of the API a readKey() that emits nothing ends its split's read (the input format's
     * nextRecord() returns null), so the key is left out by a filter after the read, not here.
     */
    public static class Read extends KeyedStateReaderFunction<String, Row> {
        transient ValueState<ScaleSavepoints.Profile> profile;
        transient ValueState<Long> lastSeen;
        transient MapState<String, Long> counters;

        @Override
        public void open(OpenContext ctx) {
            profile = getRuntimeContext().getState(profile());
            lastSeen = getRuntimeContext().getState(lastSeen());
            counters = getRuntimeContext().getMapState(counters());
        }

        @Override
        public void readKey(String key, Context ctx, Collector<Row> out) throws Exception {
            KEYS_READ.incrementAndGet();
            ScaleSavepoints.Profile p = profile.value();
            Long l = lastSeen.value();
            Map<String, Long> m = null;
            for (Map.Entry<String, Long> e : counters.entries()) {
                if (m == null) m = new HashMap<>();
                m.put(e.getKey(), e.getValue());
            }
            out.collect(Row.of(key, p, l, m));
        }
    }

    /** Writes each row's states back under its key. */
    public static class Write extends KeyedStateBootstrapFunction<String, Row> {
        transient ValueState<ScaleSavepoints.Profile> profile;
        transient ValueState<Long> lastSeen;
        transient MapState<String, Long> counters;

        @Override
        public void open(OpenContext ctx) {
            profile = getRuntimeContext().getState(profile());
            lastSeen = getRuntimeContext().getState(lastSeen());
            counters = getRuntimeContext().getMapState(counters());
        }

        @Override
        @SuppressWarnings("unchecked")
        public void processElement(Row row, Context ctx) throws Exception {
            long entries = 0;
            ScaleSavepoints.Profile p = (ScaleSavepoints.Profile) row.getField(1);
            if (p != null) { profile.update(p); entries++; }
            Long l = (Long) row.getField(2);
            if (l != null) { lastSeen.update(l); entries++; }
            Map<String, Long> m = (Map<String, Long>) row.getField(3);
            if (m != null) { counters.putAll(m); entries += m.size(); }
            KEYS_WRITTEN.incrementAndGet();
            ENTRIES_WRITTEN.addAndGet(entries);
        }
    }

    public static void main(String[] args) throws Exception {
        String in = args[0];
        String out = args[1];
        String hot = args[2];
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

        TypeInformation<ScaleSavepoints.Profile> profileType = TypeInformation.of(ScaleSavepoints.Profile.class);
        TypeInformation<Row> rowType = Types.ROW(Types.STRING, profileType, Types.LONG,
                Types.MAP(Types.STRING, Types.LONG));
        DataStream<Row> kept = SavepointReader.read(env, in, new HashMapStateBackend())
                .readKeyedState(OperatorIdentifier.forUid(UID), new Read(), Types.STRING, rowType)
                .filter(r -> !hot.equals(r.getField(0))).returns(rowType);
        StateBootstrapTransformation<Row> state = OperatorTransformation.bootstrapWith(kept)
                .keyBy(r -> (String) r.getField(0), Types.STRING)
                .transform(new Write());
        SavepointWriter.fromExistingSavepoint(env, in, new HashMapStateBackend())
                .removeOperator(OperatorIdentifier.forUid(UID))
                .withOperator(OperatorIdentifier.forUid(UID), state)
                .write(out);
        env.execute("spa-edit-drop-key");

        double seconds = (System.nanoTime() - t0) / 1e9;
        double cpu = (os.getProcessCpuTime() - cpu0) / 1e9;
        System.out.println("{\"keys_read\": " + KEYS_READ.get() + ", \"keys_written\": " + KEYS_WRITTEN.get()
                + ", \"entries_written\": " + ENTRIES_WRITTEN.get() + ", \"edit_seconds\": " + seconds
                + ", \"edit_cpu_seconds\": " + cpu + ", \"jvm_uptime_at_edit_start_seconds\": " + uptimeAtStart / 1e3
                + ", \"parallelism\": " + parallelism + "}");
        System.exit(0);
    }
}
