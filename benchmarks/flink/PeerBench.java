// Apache Flink side of State Explorer's peer benchmark (benchmarks/bench_peers.py).
//
// Reads the shared input CSV (user,ts,kind) into memory before the job (not timed),
// then runs one job on a local mini cluster at parallelism 1:
//   count     keyBy(user) -> KeyedProcessFunction with a ValueState<Long>, (user, count) out per record
//   sessions  keyBy(user) -> KeyedProcessFunction with a ListState<Event> and a ValueState<Long> session end,
//             30-minute inactivity event-time timers (the same logic as explorer.pipelines.sessions),
//             5 s bounded out-of-orderness watermarks; like explorer.pipelines.sessions it keeps each open
//             session's start, end, events and purchases beside the state as events arrive (a field, not
//             state: a session begun before a restore is read from its list), so a closing session is
//             summarised without reading its list back
// on the HashMap or the embedded RocksDB state backend, optionally checkpointing every N ms.
//
// Usage: PeerBench <input.csv> <count|sessions> <hashmap|rocksdb> <checkpoint-ms, 0 = off> <work-dir>
// Prints one line "RESULT {json}" with records, outputs, wall and process CPU time from the first
// record read to the keyed operator's close() (the processing itself), the job's net runtime, the
// wall time of execute() (mini cluster start-up included), its CPU time and the JVM's up-time.
import java.io.BufferedReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

public class PeerBench {

    static final long SESSION_GAP_MS = 30L * 60 * 1000;
    static final long MAX_OUT_OF_ORDERNESS_MS = 5_000;
    // the input, loaded before the job; the mini cluster runs in this JVM, so the source reads it directly
    static String[] USERS;
    static long[] TS;
    static String[] KINDS;
    static final AtomicLong OUTPUTS = new AtomicLong();
    static final AtomicLong CHECKSUM = new AtomicLong();
    // wall and process CPU clocks at the first record read and when the keyed operator closes
    static volatile long firstNs, firstCpuNs, lastNs, lastCpuNs;

    /** One input record (a Flink POJO: public fields, no-arg constructor). */
    public static class Event {
        public String user;
        public long ts;
        public String kind;

        public Event() {}

        public Event(String user, long ts, String kind) {
            this.user = user;
            this.ts = ts;
            this.kind = kind;
        }
    }

    /** What a closed session emits. */
    public static class Summary {
        public String user;
        public String sessionId;
        public long start;
        public long end;
        public int events;
        public int purchases;

        public Summary() {}
    }

    /** Keyed count as user code: ValueState<Long> per key, (key, count) out per record. */
    public static class CountFn extends KeyedProcessFunction<String, Event, Tuple2<String, Long>> {
        private transient ValueState<Long> count;

        @Override
        public void open(OpenContext ctx) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
        }

        @Override
        public void processElement(Event e, Context ctx, Collector<Tuple2<String, Long>> out) throws Exception {
            Long c = count.value();
            long next = c == null ? 1 : c + 1;
            count.update(next);
            OUTPUTS.incrementAndGet();
            CHECKSUM.incrementAndGet();
            out.collect(Tuple2.of(e.user, next));
        }

        @Override
        public void close() {
            lastNs = System.nanoTime();
            lastCpuNs = processCpuNanos();
        }
    }

    /** Per-user sessions closed by 30 minutes of inactivity (explorer.pipelines.sessions' logic). */
    public static class SessionFn extends KeyedProcessFunction<String, Event, Summary> {
        private transient ListState<Event> session;
        private transient ValueState<Long> sessionEnd;
        /** per user with an open session begun in this attempt: {start, end, events, purchases} (not state) */
        private transient HashMap<String, long[]> open;

        @Override
        public void open(OpenContext ctx) {
            session = getRuntimeContext().getListState(new ListStateDescriptor<>("session", TypeInformation.of(Event.class)));
            sessionEnd = getRuntimeContext().getState(new ValueStateDescriptor<>("sessionEnd", Types.LONG));
            open = new HashMap<>();
        }

        @Override
        public void processElement(Event e, Context ctx, Collector<Summary> out) throws Exception {
            Long end = sessionEnd.value();
            if (end != null && e.ts >= end) { // the gap has passed before the watermark fired the timer
                ctx.timerService().deleteEventTimeTimer(end);
                close(ctx.getCurrentKey(), out);
                end = null;
            }
            session.add(e);
            long purchase = "purchase".equals(e.kind) ? 1 : 0;
            if (end == null) { // a new session: its list was empty
                open.put(e.user, new long[] {e.ts, e.ts, 1, purchase});
            } else {
                long[] a = open.get(e.user);
                if (a != null) {
                    a[0] = Math.min(a[0], e.ts);
                    a[1] = Math.max(a[1], e.ts);
                    a[2]++;
                    a[3] += purchase;
                }
            }
            long newEnd = e.ts + SESSION_GAP_MS;
            if (end != null) {
                if (newEnd <= end) return; // out of order, inside the session
                ctx.timerService().deleteEventTimeTimer(end);
            }
            ctx.timerService().registerEventTimeTimer(newEnd);
            sessionEnd.update(newEnd);
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<Summary> out) throws Exception {
            Long end = sessionEnd.value();
            if (end != null && end == timestamp) close(ctx.getCurrentKey(), out);
        }

        @Override
        public void close() {
            lastNs = System.nanoTime();
            lastCpuNs = processCpuNanos();
        }

        private void close(String user, Collector<Summary> out) throws Exception {
            long start = Long.MAX_VALUE, last = Long.MIN_VALUE;
            int n = 0, purchases = 0;
            long[] a = open.remove(user);
            if (a != null) { // the figures kept as the events came: the list is not read
                start = a[0];
                last = a[1];
                n = (int) a[2];
                purchases = (int) a[3];
            } else {
                for (Event e : session.get()) {
                    start = Math.min(start, e.ts);
                    last = Math.max(last, e.ts);
                    n++;
                    if ("purchase".equals(e.kind)) purchases++;
                }
            }
            if (n > 0) {
                Summary s = new Summary();
                s.user = user;
                s.sessionId = user + "@" + start;
                s.start = start;
                s.end = last;
                s.events = n;
                s.purchases = purchases;
                OUTPUTS.incrementAndGet();
                CHECKSUM.addAndGet(n);
                out.collect(s);
            }
            session.clear();
            sessionEnd.clear();
        }
    }

    static long vmHwmKb() throws Exception {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (line.startsWith("VmHWM:")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
        }
        return -1;
    }

    static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    public static void main(String[] args) throws Exception {
        Path input = Paths.get(args[0]);
        String workload = args[1];
        String backend = args[2];
        long checkpointMs = Long.parseLong(args[3]);
        Path work = Paths.get(args[4]);

        List<String> users = new ArrayList<>();
        List<Long> ts = new ArrayList<>();
        List<String> kinds = new ArrayList<>();
        try (BufferedReader r = Files.newBufferedReader(input, StandardCharsets.UTF_8)) {
            r.readLine(); // header
            for (String line; (line = r.readLine()) != null; ) {
                int a = line.indexOf(','), b = line.indexOf(',', a + 1);
                users.add(line.substring(0, a).intern());
                ts.add(Long.parseLong(line.substring(a + 1, b)));
                kinds.add(line.substring(b + 1).intern());
            }
        }
        final int n = users.size();
        USERS = users.toArray(new String[0]);
        KINDS = kinds.toArray(new String[0]);
        TS = new long[n];
        for (int i = 0; i < n; i++) TS[i] = ts.get(i);
        users = null;
        ts = null;
        kinds = null;
        long loadedKb = vmHwmKb();

        Map<String, String> conf = new HashMap<>();
        conf.put("state.backend.type", backend);
        conf.put("execution.checkpointing.dir", work.resolve("checkpoints").toUri().toString());
        conf.put("execution.checkpointing.incremental", "false");
        conf.put("rest.bind-port", "0");
        conf.put("taskmanager.memory.managed.size", "256m");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        env.setParallelism(1);
        if (checkpointMs > 0) env.enableCheckpointing(checkpointMs);

        GeneratorFunction<Long, Event> gen = i -> {
            int j = (int) (long) i;
            if (j == 0) {
                firstNs = System.nanoTime();
                firstCpuNs = processCpuNanos();
            }
            return new Event(USERS[j], TS[j], KINDS[j]);
        };
        DataGeneratorSource<Event> source = new DataGeneratorSource<>(gen, n, TypeInformation.of(Event.class));
        WatermarkStrategy<Event> wm = workload.equals("sessions")
                ? WatermarkStrategy.<Event>forBoundedOutOfOrderness(Duration.ofMillis(MAX_OUT_OF_ORDERNESS_MS))
                        .withTimestampAssigner((e, t) -> e.ts)
                : WatermarkStrategy.noWatermarks();
        DataStream<Event> events = env.fromSource(source, wm, "events");
        if (workload.equals("sessions")) {
            events.keyBy(e -> e.user, Types.STRING).process(new SessionFn()).name("sessions")
                    .sinkTo(new DiscardingSink<>());
        } else {
            events.keyBy(e -> e.user, Types.STRING).process(new CountFn()).name("count")
                    .sinkTo(new DiscardingSink<>());
        }

        long cpu0 = processCpuNanos();
        long t0 = System.nanoTime();
        JobExecutionResult result = env.execute("peer-bench-" + workload);
        double executeSeconds = (System.nanoTime() - t0) / 1e9;
        double cpuSeconds = (processCpuNanos() - cpu0) / 1e9;
        double netSeconds = result.getNetRuntime(TimeUnit.MILLISECONDS) / 1e3;
        double jvmUpSeconds = ManagementFactory.getRuntimeMXBean().getUptime() / 1e3;
        double processingSeconds = (lastNs - firstNs) / 1e9;
        double processingCpuSeconds = (lastCpuNs - firstCpuNs) / 1e9;
        System.out.println("RESULT {\"records\": " + n
                + ", \"processing_seconds\": " + processingSeconds
                + ", \"processing_cpu_seconds\": " + processingCpuSeconds + ", \"output_records\": " + OUTPUTS.get()
                + ", \"checksum\": " + CHECKSUM.get() + ", \"seconds\": " + netSeconds
                + ", \"execute_seconds\": " + executeSeconds + ", \"cpu_seconds\": " + cpuSeconds
                + ", \"jvm_uptime_seconds\": " + jvmUpSeconds + ", \"rss_after_load_mb\": " + (loadedKb / 1024.0) + ", \"vm_hwm_mb\": " + (vmHwmKb() / 1024.0)
                + ", \"flink_version\": \"" + org.apache.flink.runtime.util.EnvironmentInformation.getVersion() + "\"}");
        System.exit(0);
    }
}
