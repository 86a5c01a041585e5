// Production-style Flink jobs for issue 15: every value type, window kind, join, CEP and SQL operator a real
// job meets, each writing one small snapshot plus EXPECTED.json (every state entry the job itself knows must
// be there, see Expect.java and tools/flink/README.md).
//
// Usage: ProductionFixtures <out-root> <name> <job> <hashmap|rocksdb|forst> <canonical|native|checkpoint|incremental>
//   job: plain | types | windows | joins | sql | sqlagg | sqldistinct | asyncstate (AsyncStateJob.java, Flink 2.x only)
//   -Dfixtures.changelog=true      changelog state backend (filesystem changelog storage inside the job dir)
//   -Dfixtures.filemerging=true    file-merging checkpoints (Flink 1.20+)
//
// Determinism: one source task emits events 0..N-1 (a pure function of the index), keyed exchanges keep each
// key's order, and no watermark ever advances (WatermarkStrategy.noWatermarks), so no event-time window,
// timer or join buffer is ever fired or cleaned up: the snapshot holds exactly what the input put there.
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Date;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
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
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.cep.CEP;
import org.apache.flink.cep.PatternStream;
import org.apache.flink.cep.functions.PatternProcessFunction;
import org.apache.flink.cep.pattern.Pattern;
import org.apache.flink.cep.pattern.conditions.SimpleCondition;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.co.ProcessJoinFunction;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.EventTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.GlobalWindow;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.table.api.Schema;
import org.apache.flink.table.api.StatementSet;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Either;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

public class ProductionFixtures {
    static final long BASE_TS = 1_700_000_000_000L;
    // -Dfixtures.users / -Dfixtures.events: bigger snapshots for benchmarks/bench_flink_reader.py (with
    // -Dfixtures.noentries=true: EXPECTED.json then lists the states, not every entry)
    static final int USERS = Integer.getInteger("fixtures.users", 24);
    static final int EVENTS = Integer.getInteger("fixtures.events", 480);
    static final String[] CATEGORIES = {"books", "games", "music", "food", "travel"};
    static final String[] CITIES = {"Berlin", "Lisboa", "S\u00e3o Paulo", "\u6771\u4eac", "Z\u00fcrich"};
    static final AtomicLong PROCESSED = new AtomicLong();
    static final String FIXED_JOB_ID = "f1500000000000000000000000000015";

    /** The input record: a Flink POJO. */
    public static class Event {
        public String user;
        public String category;
        public long amount;
        public long seq;
        public long ts;
        public Event() {}
    }

    static Event event(long i) {
        SplittableRandom r = new SplittableRandom(0xf15_0000L + i);
        Event e = new Event();
        int pick = r.nextInt(100);
        e.user = pick < 20 ? "user-hot" : String.format("user-%02d", r.nextInt(USERS - 1));
        e.category = CATEGORIES[r.nextInt(CATEGORIES.length)];
        e.amount = 1 + r.nextInt(100);
        e.seq = i;
        e.ts = BASE_TS + i * 1000 + r.nextInt(1000); // increasing, unique, not round
        return e;
    }

    static List<Event> events() {
        List<Event> out = new ArrayList<>();
        for (long i = 0; i < EVENTS; i++) out.add(event(i));
        return out;
    }

    static Map<String, List<Event>> byUser(List<Event> evs) {
        Map<String, List<Event>> m = new TreeMap<>();
        for (Event e : evs) m.computeIfAbsent(e.user, u -> new ArrayList<>()).add(e);
        return m;
    }

    // ------------------------------------------------------------------ value types ------------------------
    public enum Tier { BRONZE, SILVER, GOLD }

    public static class Address {
        public String city;
        public int zip;
        public Address() {}
    }

    /** A POJO with nested collections, an enum, java.time and BigDecimal fields. */
    public static class Profile {
        public String name;
        public long visits;
        public Tier tier;
        public List<String> tags;
        public Map<String, Long> perCategory;
        public Instant firstSeen;
        public LocalDateTime lastLocal;
        public LocalDate day;
        public BigDecimal spend;
        public Address address;
        public Profile() {}
    }

    /** A POJO of only POJO-friendly fields: strings, a nested POJO, a List and a Map. */
    public static class Basket {
        public String id;
        public List<Long> items;
        public Map<String, Integer> counts;
        public Address address;
        public Basket() {}
    }

    /** No no-arg constructor, private fields: Flink falls back to Kryo for it. */
    public static class LegacyThing {
        private final String label;
        private final int score;
        private final ArrayList<String> history;

        LegacyThing(String label, int score, ArrayList<String> history) {
            this.label = label;
            this.score = score;
            this.history = history;
        }
    }

    static Tier tierOf(long visits) {
        return visits >= 20 ? Tier.GOLD : visits >= 10 ? Tier.SILVER : Tier.BRONZE;
    }

    static Address addressOf(String user) {
        Address a = new Address();
        int h = Math.floorMod(user.hashCode(), CITIES.length);
        a.city = CITIES[h];
        a.zip = 10000 + Math.floorMod(user.hashCode(), 89999);
        return a;
    }

    /** Everything the types job keeps for one key; next() is the job's logic, used by the job and by EXPECTED. */
    static class TypesKey {
        Profile profile;
        Basket basket;
        Tier tier;
        Instant firstSeen;
        LocalDateTime lastLocal;
        LocalDate day;
        Date legacyDate;
        java.sql.Timestamp sqlTs;
        BigDecimal spend;
        BigInteger big;
        Row row;
        Optional<String> maybe;
        Either<String, Long> either;
        long[] longArray;
        String[] namesArray;
        byte[] bytes;
        List<Long> listValue;
        Map<String, Long> mapValue;
        LegacyThing kryo;
        Tuple3<Integer, Boolean, Character> tuple;
        Long ttlValue;
        List<String> ttlList = new ArrayList<>();
        Map<String, Long> ttlMap = new TreeMap<>();
        Map<LocalDate, Long> byDay = new TreeMap<>();
        List<Instant> visitTimes = new ArrayList<>();
        TreeSet<Long> timers = new TreeSet<>();

        void next(Event e) {
            if (profile == null) {
                profile = new Profile();
                profile.name = e.user;
                profile.tags = new ArrayList<>();
                profile.perCategory = new HashMap<>();
                profile.firstSeen = Instant.ofEpochMilli(e.ts).plusNanos(e.seq * 1000 + 7);
                profile.spend = BigDecimal.ZERO.setScale(2);
                profile.address = addressOf(e.user);
            }
            profile.visits++;
            profile.tier = tierOf(profile.visits);
            if (!profile.tags.contains(e.category)) profile.tags.add(e.category);
            profile.perCategory.merge(e.category, 1L, Long::sum);
            profile.lastLocal = LocalDateTime.ofEpochSecond(e.ts / 1000, (int) (e.ts % 1000) * 1_000_000 + 123, ZoneOffset.UTC);
            profile.day = LocalDate.ofEpochDay(e.ts / 86_400_000L);
            profile.spend = profile.spend.add(BigDecimal.valueOf(e.amount * 101, 2));
            if (basket == null) {
                basket = new Basket();
                basket.items = new ArrayList<>();
                basket.counts = new HashMap<>();
                basket.address = addressOf(e.user);
            }
            basket.id = e.user + "#" + profile.visits;
            basket.items.add(e.amount);
            if (basket.items.size() > 5) basket.items.remove(0);
            basket.counts.merge(e.category, 1, Integer::sum);
            tier = profile.tier;
            if (firstSeen == null) firstSeen = profile.firstSeen;
            lastLocal = profile.lastLocal;
            day = profile.day;
            legacyDate = new Date(e.ts);
            sqlTs = new java.sql.Timestamp(e.ts);
            sqlTs.setNanos((int) (e.ts % 1000) * 1_000_000 + (int) e.seq);
            spend = profile.spend;
            big = BigInteger.ONE.shiftLeft(70).add(BigInteger.valueOf(e.seq)).negate();
            row = Row.of(profile.address.city, profile.visits, e.amount / 4.0); // RowSerializer wants positions

            maybe = profile.visits % 2 == 0 ? Optional.of(e.category) : Optional.empty();
            either = e.amount % 2 == 0 ? Either.Left(e.category) : Either.Right(e.amount);
            long[] la = longArray == null ? new long[0] : longArray;
            longArray = Arrays.copyOf(la, Math.min(la.length + 1, 3));
            if (la.length >= 3) System.arraycopy(la, 1, longArray, 0, 2);
            longArray[longArray.length - 1] = e.amount;
            namesArray = profile.tags.toArray(new String[0]);
            bytes = new byte[] {(byte) e.amount, (byte) (e.seq >> 8), (byte) e.seq, (byte) 0xff};
            if (listValue == null) listValue = new ArrayList<>();
            listValue.add(e.seq);
            if (listValue.size() > 4) listValue.remove(0);
            if (mapValue == null) mapValue = new HashMap<>();
            mapValue.merge(e.category, e.amount, Long::sum);
            ArrayList<String> hist = kryo == null ? new ArrayList<>() : new ArrayList<>(kryo.history);
            hist.add(e.category);
            if (hist.size() > 3) hist.remove(0);
            kryo = new LegacyThing(e.user.toUpperCase(), (int) profile.visits * 10, hist);
            tuple = Tuple3.of((int) e.amount, e.amount > 50, e.category.charAt(0));
            ttlValue = e.ts;
            if (e.amount > 80) ttlList.add(e.category + ":" + e.amount);
            ttlMap.merge(e.category, e.amount, Long::sum);
            byDay.merge(profile.day, 1L, Long::sum);
            visitTimes.add(Instant.ofEpochMilli(e.ts));
            timers.add((e.ts / 60_000 + 1) * 60_000);
        }
    }

    static StateTtlConfig ttl(Duration d) {
        return ((StateTtlConfig.Builder) timed(null, StateTtlConfig.class, "newBuilder", d.toMillis()))
                .updateTtlOnCreateAndWrite().neverReturnExpired().build();
    }

    /** Calls a method taking durations: its Duration overload (Flink 1.19+), else its Time one (Flink 1.x). */
    @SuppressWarnings("unchecked")
    static <T> T timed(Object target, Class<?> cls, String method, long... ms) {
        try {
            java.lang.reflect.Method timeVariant = null;
            for (java.lang.reflect.Method m : cls.getMethods()) {
                if (!m.getName().equals(method) || m.getParameterCount() != ms.length) continue;
                Class<?> pt = m.getParameterTypes()[0];
                if (pt == Duration.class) {
                    Object[] a = new Object[ms.length];
                    for (int i = 0; i < ms.length; i++) a[i] = Duration.ofMillis(ms[i]);
                    return (T) m.invoke(target, a);
                }
                if (pt.getSimpleName().equals("Time")) timeVariant = m;
            }
            Object[] a = new Object[ms.length];
            Class<?> pt = timeVariant.getParameterTypes()[0];
            for (int i = 0; i < ms.length; i++) a[i] = pt.getMethod("milliseconds", long.class).invoke(null, ms[i]);
            return (T) timeVariant.invoke(target, a);
        } catch (ReflectiveOperationException e) {
            throw new RuntimeException(cls + "." + method, e);
        }
    }

    public static class TypesFunction extends KeyedProcessFunction<String, Event, Void> {
        transient Map<String, Object> st;

        @SuppressWarnings({"unchecked", "rawtypes"})
        ValueState v(String name, TypeInformation<?> t) {
            return getRuntimeContext().getState(new ValueStateDescriptor(name, t));
        }

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void processElement(Event e, Context ctx, Collector<Void> out) throws Exception {
            TypesKey k = new TypesKey();
            // load the key's state into the model, apply the job logic, write everything back
            ValueState<Profile> profile = v("profile", TypeInformation.of(Profile.class));
            ValueState<Basket> basket = v("basket", TypeInformation.of(Basket.class));
            ValueState<Tier> tier = v("tier", TypeInformation.of(Tier.class));
            ValueState<Instant> firstSeen = v("first_seen", Types.INSTANT);
            ValueState<LocalDateTime> lastLocal = v("last_local", Types.LOCAL_DATE_TIME);
            ValueState<LocalDate> day = v("day", Types.LOCAL_DATE);
            ValueState<Date> legacyDate = v("legacy_date", TypeInformation.of(Date.class));
            ValueState<java.sql.Timestamp> sqlTs = v("sql_ts", Types.SQL_TIMESTAMP);
            ValueState<BigDecimal> spend = v("spend", Types.BIG_DEC);
            ValueState<BigInteger> big = v("big", Types.BIG_INT);
            ValueState<Row> row = v("row", Types.ROW_NAMED(new String[] {"city", "visits", "score"},
                    Types.STRING, Types.LONG, Types.DOUBLE));
            ValueState<Optional<String>> maybe = v("maybe", TypeInformation.of(new TypeHint<Optional<String>>() {}));
            ValueState<Either<String, Long>> either = v("either", TypeInformation.of(new TypeHint<Either<String, Long>>() {}));
            ValueState<long[]> longArray = v("long_array", Types.PRIMITIVE_ARRAY(Types.LONG));
            ValueState<String[]> namesArray = v("names_array", Types.OBJECT_ARRAY(Types.STRING));
            ValueState<byte[]> bytes = v("bytes", Types.PRIMITIVE_ARRAY(Types.BYTE));
            ValueState<List<Long>> listValue = v("list_value", Types.LIST(Types.LONG));
            ValueState<Map<String, Long>> mapValue = v("map_value", Types.MAP(Types.STRING, Types.LONG));
            ValueState<LegacyThing> kryo = v("kryo", TypeInformation.of(LegacyThing.class));
            ValueState<Tuple3<Integer, Boolean, Character>> tuple = v("tuple", Types.TUPLE(Types.INT, Types.BOOLEAN, Types.CHAR));
            ValueStateDescriptor<Long> tvd = new ValueStateDescriptor<>("ttl_value", Types.LONG);
            tvd.enableTimeToLive(ttl(Duration.ofHours(1)));
            ValueState<Long> ttlValue = getRuntimeContext().getState(tvd);
            ListStateDescriptor<String> tld = new ListStateDescriptor<>("ttl_list", Types.STRING);
            tld.enableTimeToLive(ttl(Duration.ofHours(2)));
            ListState<String> ttlList = getRuntimeContext().getListState(tld);
            MapStateDescriptor<String, Long> tmd = new MapStateDescriptor<>("ttl_map", Types.STRING, Types.LONG);
            tmd.enableTimeToLive(ttl(Duration.ofDays(1)));
            MapState<String, Long> ttlMap = getRuntimeContext().getMapState(tmd);
            MapState<LocalDate, Long> byDay = getRuntimeContext().getMapState(
                    new MapStateDescriptor<>("by_day", Types.LOCAL_DATE, Types.LONG));
            ListState<Instant> visitTimes = getRuntimeContext().getListState(
                    new ListStateDescriptor<>("visit_times", Types.INSTANT));

            k.profile = profile.value();
            k.basket = basket.value();
            k.firstSeen = firstSeen.value();
            k.longArray = longArray.value();
            k.listValue = listValue.value();
            k.mapValue = mapValue.value();
            k.kryo = kryo.value();
            k.next(e);
            profile.update(k.profile);
            basket.update(k.basket);
            tier.update(k.tier);
            firstSeen.update(k.firstSeen);
            lastLocal.update(k.lastLocal);
            day.update(k.day);
            legacyDate.update(k.legacyDate);
            sqlTs.update(k.sqlTs);
            spend.update(k.spend);
            big.update(k.big);
            row.update(k.row);
            maybe.update(k.maybe);
            either.update(k.either);
            longArray.update(k.longArray);
            namesArray.update(k.namesArray);
            bytes.update(k.bytes);
            listValue.update(k.listValue);
            mapValue.update(k.mapValue);
            kryo.update(k.kryo);
            tuple.update(k.tuple);
            ttlValue.update(k.ttlValue);
            if (e.amount > 80) ttlList.add(e.category + ":" + e.amount);
            Long c = ttlMap.get(e.category);
            ttlMap.put(e.category, c == null ? e.amount : c + e.amount);
            Long d = byDay.get(k.day);
            byDay.put(k.day, d == null ? 1L : d + 1);
            visitTimes.add(Instant.ofEpochMilli(e.ts));
            ctx.timerService().registerEventTimeTimer((e.ts / 60_000 + 1) * 60_000);
            PROCESSED.incrementAndGet();
        }
    }

    static void expectTypes(Expect x) {
        String op = "user-types";
        x.opName(op, "user-types");
        for (Map.Entry<String, List<Event>> u : byUser(events()).entrySet()) {
            TypesKey k = new TypesKey();
            for (Event e : u.getValue()) k.next(e);
            String key = u.getKey();
            Row named = Row.withNames(); // the type info names the fields: EXPECTED shows them by name
            named.setField("city", k.row.getField(0));
            named.setField("visits", k.row.getField(1));
            named.setField("score", k.row.getField(2));
            Object[][] values = {
                    {"profile", "POJO Profile (List, Map, enum, Instant, LocalDateTime, LocalDate, BigDecimal, POJO)", k.profile},
                    {"basket", "POJO Basket (List<Long>, Map<String,Integer>, POJO)", k.basket},
                    {"tier", "Enum Tier", k.tier},
                    {"first_seen", "Instant", k.firstSeen},
                    {"last_local", "LocalDateTime", k.lastLocal},
                    {"day", "LocalDate", k.day},
                    {"legacy_date", "java.util.Date", k.legacyDate},
                    {"sql_ts", "java.sql.Timestamp", k.sqlTs},
                    {"spend", "BigDecimal", k.spend},
                    {"big", "BigInteger", k.big},
                    {"row", "Row(city STRING, visits BIGINT, score DOUBLE)", named},
                    {"maybe", "Optional<String> (GenericType: Kryo)", k.maybe},
                    {"either", "Either<String, Long>", k.either},
                    {"long_array", "long[]", k.longArray},
                    {"names_array", "String[]", k.namesArray},
                    {"bytes", "byte[]", k.bytes},
                    {"list_value", "ValueState of Types.LIST(Types.LONG)", k.listValue},
                    {"map_value", "ValueState of Types.MAP(Types.STRING, Types.LONG)", k.mapValue},
                    {"kryo", "GenericType LegacyThing (Kryo FieldSerializer)", k.kryo},
                    {"tuple", "Tuple3<Integer, Boolean, Character>", k.tuple},
                    {"ttl_value", "Long with TTL 1 h", k.ttlValue},
            };
            for (Object[] v : values) {
                x.entry(op, (String) v[0], "value", (String) v[1], key, null, null, v[2]);
            }
            for (int i = 0; i < k.ttlList.size(); i++) {
                x.entry(op, "ttl_list", "list", "List<String> with TTL 2 h", key, null, i, k.ttlList.get(i));
            }
            x.state(op, "ttl_list", "list", "List<String> with TTL 2 h");
            for (Map.Entry<String, Long> m : k.ttlMap.entrySet()) {
                x.entry(op, "ttl_map", "map", "Map<String, Long> with TTL 1 d", key, null, m.getKey(), m.getValue());
            }
            for (Map.Entry<LocalDate, Long> m : k.byDay.entrySet()) {
                x.entry(op, "by_day", "map", "Map<LocalDate, Long>", key, null, m.getKey(), m.getValue());
            }
            for (int i = 0; i < k.visitTimes.size(); i++) {
                x.entry(op, "visit_times", "list", "List<Instant>", key, null, i, k.visitTimes.get(i));
            }
            for (long t : k.timers) {
                x.entry(op, "_timer_state/event_user-timers", "event_timer", "Timer<String, VoidNamespace>", key, null, null, t);
            }
        }
    }

    // ------------------------------------------------------------------ plain (backends) -------------------
    public static class Stats {
        public long count;
        public long total;
        public String lastCategory;
        public Stats() {}
    }

    public static class PlainFunction extends KeyedProcessFunction<String, Event, Void> {
        @Override
        public void processElement(Event e, Context ctx, Collector<Void> out) throws Exception {
            ValueState<Stats> stats = getRuntimeContext().getState(new ValueStateDescriptor<>("stats", Stats.class));
            ListState<Long> amounts = getRuntimeContext().getListState(new ListStateDescriptor<>("amounts", Types.LONG));
            MapState<String, Long> perCat = getRuntimeContext().getMapState(
                    new MapStateDescriptor<>("per_category", Types.STRING, Types.LONG));
            ReducingState<Long> total = getRuntimeContext().getReducingState(
                    new ReducingStateDescriptor<>("total", Long::sum, Types.LONG));
            Stats s = stats.value();
            if (s == null) s = new Stats();
            s.count++;
            s.total += e.amount;
            s.lastCategory = e.category;
            stats.update(s);
            amounts.add(e.amount);
            Long c = perCat.get(e.category);
            perCat.put(e.category, c == null ? 1L : c + 1);
            total.add(e.amount);
            ctx.timerService().registerEventTimeTimer((e.ts / 60_000 + 1) * 60_000);
            PROCESSED.incrementAndGet();
        }
    }

    public static class CountAgg implements AggregateFunction<Event, Long, Long> {
        public Long createAccumulator() { return 0L; }
        public Long add(Event e, Long acc) { PROCESSED.incrementAndGet(); return acc + 1; }
        public Long getResult(Long acc) { return acc; }
        public Long merge(Long a, Long b) { return a + b; }
    }

    static void expectPlain(Expect x) {
        String op = "user-activity";
        x.opName(op, "user-activity");
        for (Map.Entry<String, List<Event>> u : byUser(events()).entrySet()) {
            Stats s = new Stats();
            Map<String, Long> perCat = new TreeMap<>();
            TreeSet<Long> timers = new TreeSet<>();
            String key = u.getKey();
            int i = 0;
            for (Event e : u.getValue()) {
                s.count++;
                s.total += e.amount;
                s.lastCategory = e.category;
                perCat.merge(e.category, 1L, Long::sum);
                timers.add((e.ts / 60_000 + 1) * 60_000);
                x.entry(op, "amounts", "list", "List<Long>", key, null, i++, e.amount);
            }
            x.entry(op, "stats", "value", "POJO Stats", key, null, null, s);
            x.entry(op, "total", "reducing", "Long", key, null, null, s.total);
            for (Map.Entry<String, Long> m : perCat.entrySet()) {
                x.entry(op, "per_category", "map", "Map<String, Long>", key, null, m.getKey(), m.getValue());
            }
            for (long t : timers) {
                x.entry(op, "_timer_state/event_user-timers", "event_timer", "Timer<String, VoidNamespace>", key, null, null, t);
            }
        }
        String wop = "category-windows";
        x.opName(wop, "category-windows");
        Map<String, TreeMap<Long, Long>> win = new TreeMap<>();
        for (Event e : events()) {
            long start = e.ts - Math.floorMod(e.ts, 60_000L);
            win.computeIfAbsent(e.category, c -> new TreeMap<>()).merge(start, 1L, Long::sum);
        }
        for (Map.Entry<String, TreeMap<Long, Long>> c : win.entrySet()) {
            for (Map.Entry<Long, Long> w : c.getValue().entrySet()) {
                Object ns = Expect.timeWindow(w.getKey(), w.getKey() + 60_000);
                x.entry(wop, "window-contents", "aggregating", "Long", c.getKey(), ns, null, w.getValue());
                x.entry(wop, "_timer_state/event_window-timers", "event_timer", "Timer<String, TimeWindow>",
                        c.getKey(), ns, null, w.getKey() + 60_000 - 1);
            }
        }
    }

    // ------------------------------------------------------------------ windows -----------------------------
    public static class AvgAcc {
        public long sum;
        public long count;
        public AvgAcc() {}
    }

    public static class AvgAgg implements AggregateFunction<Event, AvgAcc, Double> {
        public AvgAcc createAccumulator() { return new AvgAcc(); }
        public AvgAcc add(Event e, AvgAcc a) { a.sum += e.amount; a.count++; PROCESSED.incrementAndGet(); return a; }
        public Double getResult(AvgAcc a) { return a.count == 0 ? 0.0 : (double) a.sum / a.count; }
        public AvgAcc merge(AvgAcc a, AvgAcc b) { a.sum += b.sum; a.count += b.count; return a; }
    }

    public static class CountSum implements AggregateFunction<Event, Tuple2<Long, Long>, Tuple2<Long, Long>> {
        public Tuple2<Long, Long> createAccumulator() { return Tuple2.of(0L, 0L); }
        public Tuple2<Long, Long> add(Event e, Tuple2<Long, Long> a) { PROCESSED.incrementAndGet(); return Tuple2.of(a.f0 + 1, a.f1 + e.amount); }
        public Tuple2<Long, Long> getResult(Tuple2<Long, Long> a) { return a; }
        public Tuple2<Long, Long> merge(Tuple2<Long, Long> a, Tuple2<Long, Long> b) { return Tuple2.of(a.f0 + b.f0, a.f1 + b.f1); }
    }

    public static class SessionSummary extends ProcessWindowFunction<Event, String, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<Event> els, Collector<String> out) {}
    }

    static final long TUMBLE = 60_000, SLIDE_SIZE = 30_000, SLIDE = 10_000, GAP = 10_000;
    static final int COUNT = 5;

    static void expectWindows(Expect x) {
        Map<String, List<Event>> users = byUser(events());
        for (Map.Entry<String, List<Event>> u : users.entrySet()) {
            String key = u.getKey();
            // tumbling reduce of (user, amount) tuples
            TreeMap<Long, Long> tumble = new TreeMap<>();
            TreeMap<Long, AvgAcc> slide = new TreeMap<>();
            for (Event e : u.getValue()) {
                tumble.merge(e.ts - Math.floorMod(e.ts, TUMBLE), e.amount, Long::sum);
                long last = e.ts - Math.floorMod(e.ts, SLIDE);
                for (long s = last; s > e.ts - SLIDE_SIZE; s -= SLIDE) {
                    AvgAcc a = slide.computeIfAbsent(s, z -> new AvgAcc());
                    a.sum += e.amount;
                    a.count++;
                }
            }
            for (Map.Entry<Long, Long> w : tumble.entrySet()) {
                Object ns = Expect.timeWindow(w.getKey(), w.getKey() + TUMBLE);
                x.entry("tumbling-reduce", "window-contents", "reducing", "Tuple2<String, Long>", key, ns, null,
                        Tuple2.of(key, w.getValue()));
                x.entry("tumbling-reduce", "_timer_state/event_window-timers", "event_timer", "Timer<String, TimeWindow>",
                        key, ns, null, w.getKey() + TUMBLE - 1);
            }
            for (Map.Entry<Long, AvgAcc> w : slide.entrySet()) {
                Object ns = Expect.timeWindow(w.getKey(), w.getKey() + SLIDE_SIZE);
                x.entry("sliding-aggregate", "window-contents", "aggregating", "POJO AvgAcc", key, ns, null, w.getValue());
                x.entry("sliding-aggregate", "_timer_state/event_window-timers", "event_timer", "Timer<String, TimeWindow>",
                        key, ns, null, w.getKey() + SLIDE_SIZE - 1);
            }
            // sessions, in arrival order: the state window is the session's first element's window
            List<long[]> sessions = new ArrayList<>(); // start, end, stateStart, stateEnd
            List<List<Event>> members = new ArrayList<>();
            for (Event e : u.getValue()) {
                long[] cur = sessions.isEmpty() ? null : sessions.get(sessions.size() - 1);
                if (cur != null && e.ts <= cur[1]) {
                    cur[1] = Math.max(cur[1], e.ts + GAP);
                    members.get(members.size() - 1).add(e);
                } else {
                    sessions.add(new long[] {e.ts, e.ts + GAP, e.ts, e.ts + GAP});
                    members.add(new ArrayList<>(List.of(e)));
                }
            }
            for (int i = 0; i < sessions.size(); i++) {
                long[] s = sessions.get(i);
                Object stateNs = Expect.timeWindow(s[2], s[3]);
                Object actual = Expect.timeWindow(s[0], s[1]);
                List<Event> m = members.get(i);
                for (int j = 0; j < m.size(); j++) {
                    x.entry("session-process", "window-contents", "list", "List<POJO Event>", key, stateNs, j, m.get(j));
                }
                x.entry("session-process", "_timer_state/event_window-timers", "event_timer", "Timer<String, TimeWindow>",
                        key, actual, null, s[1] - 1);
                // merging-window-set: ListState<Tuple2<window, state window>> in VoidNamespace; order not asserted
                x.entry("session-process", "merging-window-set", "list", "List<Tuple2<TimeWindow, TimeWindow>>", key, null,
                        Expect.ANY, new Expect.Raw("{\"type\": \"tuple\", \"fields\": [" + Expect.enc(actual) + ", "
                                + Expect.enc(stateNs) + "]}"));
            }
            // countWindow(5): purged every 5 elements; the rest waits in GlobalWindow with the trigger's count
            int n = u.getValue().size();
            int rest = n % COUNT;
            if (rest > 0) {
                long sum = 0;
                for (Event e : u.getValue().subList(n - rest, n)) sum += e.amount;
                Object g = new Expect.Raw("{\"type\": \"global_window\"}");
                x.entry("count-window", "window-contents", "aggregating", "Tuple2<Long, Long>", key, g, null,
                        Tuple2.of((long) rest, sum));
                x.entry("count-window", "count", "reducing", "Long (CountTrigger)", key, g, null, (long) rest);
            }
        }
        x.state("tumbling-reduce", "window-contents", "reducing", "Tuple2<String, Long>");
    }

    // ------------------------------------------------------------------ joins and CEP -----------------------
    public static class NoJoin extends ProcessJoinFunction<Event, Event, String> {
        @Override
        public void processElement(Event l, Event r, Context ctx, Collector<String> out) {}
    }

    static boolean isBig(Event e) { return e.amount >= 80; }
    static boolean isSmall(Event e) { return e.amount < 20; }

    static void expectJoins(Expect x) {
        for (Map.Entry<String, List<Event>> u : byUser(events()).entrySet()) {
            String key = u.getKey();
            TreeMap<Long, List<Event>> left = new TreeMap<>(), right = new TreeMap<>();
            for (Event e : u.getValue()) {
                (e.seq % 2 == 0 ? left : right).computeIfAbsent(e.ts, t -> new ArrayList<>()).add(e);
            }
            for (Object[] side : new Object[][] {{"LEFT_BUFFER", left}, {"RIGHT_BUFFER", right}}) {
                @SuppressWarnings("unchecked")
                TreeMap<Long, List<Event>> m = (TreeMap<Long, List<Event>>) side[1];
                for (Map.Entry<Long, List<Event>> t : m.entrySet()) {
                    StringBuilder b = new StringBuilder("[");
                    for (Event e : t.getValue()) {
                        b.append(b.length() > 1 ? ", " : "").append("{\"type\": \"buffer_entry\", \"element\": ")
                                .append(Expect.enc(e)).append("}"); // hasBeenJoined depends on input interleaving
                    }
                    x.entry("interval-join", (String) side[0], "map", "Map<Long, List<BufferEntry<POJO Event>>>", key,
                            null, t.getKey(), new Expect.Raw(b.append("]").toString()));
                }
            }
            // CEP in processing time: begin(big).next(small); a partial match is pending iff the last event was big
            // the NFA state is written only once it changed: for keys that ever saw a "big" event
            if (u.getValue().stream().anyMatch(ProductionFixtures::isBig)) {
                x.entry("cep-big-then-small", "nfaStateName", "value", "NFAState", key, null, null, Expect.ANY);
            }
            Event last = u.getValue().get(u.getValue().size() - 1);
            if (isBig(last)) {
                x.entry("cep-big-then-small", "sharedBuffer-events", "map", "Map<EventId, Lockable<POJO Event>>", key, null,
                        Expect.ANY, new Expect.Raw("{\"type\": \"lockable\", \"element\": " + Expect.enc(last) + "}"));
            }
        }
        x.state("interval-join", "LEFT_BUFFER", "map", "Map<Long, List<BufferEntry<POJO Event>>>");
    }

    // ------------------------------------------------------------------ SQL ---------------------------------
    static Row sqlRow(Event e) {
        Row r = Row.withPositions(5);
        r.setField(0, e.user);
        r.setField(1, e.category);
        r.setField(2, e.amount);
        r.setField(3, e.seq);
        r.setField(4, new Expect.Raw("{\"type\": \"timestamp_ltz\", \"value\": \"" + Instant.ofEpochMilli(e.ts) + "\", \"epoch_ms\": " + e.ts + "}"));
        return r;
    }

    /** A row of MATCH_RECOGNIZE's event queue: the 5 input columns and the rowtime again, as the planner
     *  keeps it (its input is the events with the ORDER BY time attribute appended as a 6th field). */
    static Row matchRow(Event e) {
        Row five = sqlRow(e);
        Row r = Row.withPositions(6);
        for (int i = 0; i < 5; i++) r.setField(i, five.getField(i));
        r.setField(5, five.getField(4));
        return r;
    }

    static Object rowKey(Object... fields) {
        StringBuilder b = new StringBuilder("{\"type\": \"row\", \"kind\": \"+I\", \"fields\": [");
        for (int i = 0; i < fields.length; i++) b.append(i > 0 ? ", " : "").append(Expect.enc(fields[i]));
        return new Expect.Raw(b.append("]}").toString());
    }

    static void expectSql(Expect x) {
        // operators are named by the planner; EXPECTED names them by their operator-name prefix
        Map<String, List<Event>> users = byUser(events());
        for (Map.Entry<String, List<Event>> u : users.entrySet()) {
            Object key = rowKey(u.getKey());
            TreeSet<String> cats = new TreeSet<>();
            for (Event e : u.getValue()) cats.add(e.category);
            for (String c : cats) {
                x.entry("GroupAggregate", "distinctAcc_0", "map", "MapView<category, Long>", key, null, rowKey(c), Expect.ANY);
            }
            x.entry("GroupAggregate", "accState", "value", "Row(count distinct, count)", key, null, null, Expect.ANY);
            // rowtime first-row deduplication: the first event of each user
            // (Flink 2.x keeps the candidate until the watermark passes it: the watermark never does here)
            x.entry("Deduplicate", "waiting-to-emit-on-timer", "value", "Row(events)", key, null, null, sqlRow(u.getValue().get(0)));
            // MATCH_RECOGNIZE on event time: no watermark passed, so every row waits in the element queue
            TreeMap<Long, List<Row>> q = new TreeMap<>();
            for (Event e : u.getValue()) q.computeIfAbsent(e.ts, t -> new ArrayList<>()).add(matchRow(e));
            for (Map.Entry<Long, List<Row>> t : q.entrySet()) {
                x.entry("Match", "eventQueuesStateName", "map", "Map<Long, List<Row>>", key, null, t.getKey(), t.getValue());
            }
        }
        TreeSet<String> cats = new TreeSet<>(Arrays.asList(CATEGORIES));
        for (String c : cats) x.entry("Rank", "data-state-with-append", "map", "Map<Row sort key, List<Row>>", rowKey(c), null,
                Expect.ANY, Expect.ANY);
        for (String u : users.keySet()) {
            x.entry("Join", "left-records", "map", "joined rows (left)", rowKey(u), null, Expect.ANY, Expect.ANY);
            x.entry("IntervalJoin", "IntervalJoinLeftCache", "map", "Map<Long, List<Tuple2<Row, Boolean>>>", rowKey(u), null,
                    Expect.ANY, Expect.ANY);
        }
    }

    /** A GroupAggregate whose accumulator row holds every kind of field: COUNT(DISTINCT) (its MapView in a state of
     *  its own, a RawType placeholder in the row), COUNT, MAX (BIGINT fields), LISTAGG (two STRING fields) and
     *  LAST_VALUE (a nested ROW(lastValue, lastOrder): a variable-length field of the BinaryRowData). The
     *  accumulator fields are in aggregate order, the distinct views after them (Flink's AggsHandler layout). */
    static final String SQLAGG = "INSERT INTO agg_sink SELECT user_name, COUNT(DISTINCT category), COUNT(*), "
            + "MAX(amount), LISTAGG(category), LAST_VALUE(category) FROM events GROUP BY user_name";

    static void expectSqlAgg(Expect x) {
        for (Map.Entry<String, List<Event>> u : byUser(events()).entrySet()) {
            Object key = rowKey(u.getKey());
            TreeMap<String, Long> cats = new TreeMap<>();
            long max = Long.MIN_VALUE;
            StringBuilder list = new StringBuilder();
            for (Event e : u.getValue()) {
                cats.put(e.category, 1L);  // the distinct view's value: a bit per distinct aggregate using it
                max = Math.max(max, e.amount);
                list.append(list.length() > 0 ? "," : "").append(e.category);
            }
            for (Map.Entry<String, Long> c : cats.entrySet()) {
                x.entry("GroupAggregate", "distinctAcc_0", "map", "MapView<category, Long>", key, null, rowKey(c.getKey()), c.getValue());
            }
            String last = u.getValue().get(u.getValue().size() - 1).category;
            x.entry("GroupAggregate", "accState", "value",
                    "Row(count distinct, count, max, listagg (delimiter, acc), last_value row(value, order), distinct view)",
                    key, null, null, new Expect.Raw("{\"type\": \"row\", \"kind\": \"+I\", \"fields\": ["
                            + cats.size() + ", " + u.getValue().size() + ", " + max + ", " + Expect.str(",") + ", "
                            + Expect.str(list.toString()) + ", " + Expect.enc(rowKey(last, Long.MIN_VALUE)) + ", "
                            + "{\"type\": \"dataview\", \"view\": \"MapView\"}]}"));
        }
    }

    // ------------------------------------------------------------------ COUNT(DISTINCT) variants (issue 33) ---
    // -Dfixtures.sqlvariant=plain|minibatch|split|retract: the variants of COUNT(DISTINCT ...) real jobs run.
    //   plain      one GroupAggregate: distinct on INT and BIGINT columns, two FILTERed distinct aggregates sharing
    //              one view (bitmap value), COUNT and SUM DISTINCT sharing one view, and a nullable INT column (its
    //              NULL key in a state of its own). (COUNT(DISTINCT a, b) is refused by the 2.3 planner: "We now only
    //              support the count of one field.")
    //   minibatch  the same query with mini-batch, two-phase (Local/GlobalGroupAggregate) and table.exec.state.ttl
    //   split      COUNT(DISTINCT amount), SUM(amount) with mini-batch, two-phase and distinct-agg split
    //              (partial aggregates keyed by a hash bucket of the distinct column)
    //   retract    distinct aggregates fed by a last-row deduplication (updates and retractions): the view's value is
    //              a count per FILTER, an ARRAY<BIGINT>
    //   groupwindow  the legacy group window (GROUP BY TUMBLE(rt, ..)) with COUNT(DISTINCT): namespace TimeWindow
    //   (-Dfixtures.asyncsql=true: table.exec.async-state.enabled, for ForSt)
    //   types      distinct views keyed by DECIMAL, TIMESTAMP_LTZ, DOUBLE, BOOLEAN and DATE values
    //   window     a window TVF (TUMBLE, 1 minute) with COUNT(DISTINCT), mini-batch two-phase (Local/Global
    //              WindowAggregate): the views' namespace is the window's end; the watermark stays a day behind,
    //              so no window fires
    static final String SQLDISTINCT = "INSERT INTO dsink SELECT user_name, COUNT(DISTINCT bucket), COUNT(DISTINCT amount), "
            + "COUNT(DISTINCT category) FILTER (WHERE amount >= 50), "
            + "COUNT(DISTINCT category) FILTER (WHERE amount < 50), SUM(DISTINCT bucket), COUNT(DISTINCT opt) "
            + "FROM events GROUP BY user_name";
    static final String SQLDISTINCT_SPLIT = "INSERT INTO ssink SELECT user_name, COUNT(DISTINCT amount), SUM(amount) "
            + "FROM events GROUP BY user_name";
    static final String SQLDISTINCT_RETRACT = "INSERT INTO rsink SELECT category, COUNT(DISTINCT user_name), "
            + "COUNT(DISTINCT user_name) FILTER (WHERE amount >= 50), COUNT(DISTINCT user_name) FILTER (WHERE amount < 50) "
            + "FROM (SELECT user_name, category, amount FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user_name, category "
            + "ORDER BY pt DESC) AS rn FROM events) WHERE rn = 1) GROUP BY category";

    static final String SQLDISTINCT_WINDOW = "INSERT INTO wsink SELECT user_name, window_start, window_end, "
            + "COUNT(DISTINCT category), COUNT(DISTINCT amount), COUNT(*) FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), "
            + "INTERVAL '1' MINUTE)) GROUP BY user_name, window_start, window_end";
    static final long SQL_WINDOW = 60_000;
    static final String SQLDISTINCT_GROUPWINDOW = "INSERT INTO gsink SELECT user_name, TUMBLE_START(rt, INTERVAL '1' MINUTE), "
            + "COUNT(DISTINCT category), COUNT(*) FROM events GROUP BY user_name, TUMBLE(rt, INTERVAL '1' MINUTE)";
    static final String SQLDISTINCT_TYPES = "INSERT INTO tsink SELECT user_name, COUNT(DISTINCT CAST(amount AS DECIMAL(10, 2))), "
            + "COUNT(DISTINCT TO_TIMESTAMP_LTZ(ts, 3)), COUNT(DISTINCT CAST(amount AS DOUBLE) / 4), COUNT(DISTINCT amount > 50), "
            + "COUNT(DISTINCT CAST(TO_TIMESTAMP_LTZ(ts, 3) AS DATE)) FROM events GROUP BY user_name";

    static int bucket(Event e) { return (int) (e.amount % 10); }
    static Integer opt(Event e) { return e.seq % 4 == 0 ? null : (int) (e.amount % 7); }

    static Object dataView() { return new Expect.Raw("{\"type\": \"dataview\", \"view\": \"MapView\"}"); }

    static Object row(Object... fields) {  // an accumulator row: fields already Java values or Raw
        StringBuilder b = new StringBuilder("{\"type\": \"row\", \"kind\": \"+I\", \"fields\": [");
        for (int i = 0; i < fields.length; i++) b.append(i > 0 ? ", " : "").append(Expect.enc(fields[i]));
        return new Expect.Raw(b.append("]}").toString());
    }

    static void expectSqlDistinct(Expect x, String variant) {
        Map<String, List<Event>> users = byUser(events());
        if (variant.equals("retract")) {
            // the last event of each (user, category) survives the deduplication; each user counts once per category
            Map<String, TreeMap<String, Event>> last = new TreeMap<>();
            for (Event e : events()) last.computeIfAbsent(e.category, c -> new TreeMap<>()).put(e.user, e);
            for (Map.Entry<String, TreeMap<String, Event>> c : last.entrySet()) {
                long big = 0, small = 0;
                for (Map.Entry<String, Event> u : c.getValue().entrySet()) {
                    boolean isBig = u.getValue().amount >= 50;
                    big += isBig ? 1 : 0;
                    small += isBig ? 0 : 1;
                    // one count per aggregate sharing the view: COUNT, COUNT FILTER big, COUNT FILTER small
                    x.entry("GroupAggregate", "distinctAcc_0", "map", "MapView<user_name, ARRAY<BIGINT> counts>",
                            rowKey(c.getKey()), null, rowKey(u.getKey()), Arrays.asList(1L, isBig ? 1L : 0L, isBig ? 0L : 1L));
                }
                long n = c.getValue().size();
                x.entry("GroupAggregate", "accState", "value", "Row(count distinct x3, record count, distinct view)",
                        rowKey(c.getKey()), null, null, row(n, big, small, n, dataView()));
            }
            return;
        }
        if (variant.equals("groupwindow")) {
            for (Map.Entry<String, List<Event>> u : users.entrySet()) {
                TreeMap<Long, List<Event>> windows = new TreeMap<>();
                for (Event e : u.getValue()) windows.computeIfAbsent(e.ts - Math.floorMod(e.ts, SQL_WINDOW), w -> new ArrayList<>()).add(e);
                for (Map.Entry<Long, List<Event>> w : windows.entrySet()) {
                    Object ns = Expect.timeWindow(w.getKey(), w.getKey() + SQL_WINDOW);
                    TreeSet<String> cats = new TreeSet<>();
                    for (Event e : w.getValue()) cats.add(e.category);
                    for (String c : cats) x.entry("GroupWindowAggregate", "distinctAcc_0", "map", "MapView<category, Long bitmap>",
                            rowKey(u.getKey()), ns, c, 1L);
                    x.entry("GroupWindowAggregate", "window-aggs", "value", "Row(count distinct, count, distinct view)",
                            rowKey(u.getKey()), ns, null, row((long) cats.size(), (long) w.getValue().size(), dataView()));
                }
            }
            return;
        }
        if (variant.equals("types")) {
            for (Map.Entry<String, List<Event>> u : users.entrySet()) {
                Object key = rowKey(u.getKey());
                TreeSet<Long> amounts = new TreeSet<>(), times = new TreeSet<>();
                TreeSet<Boolean> big = new TreeSet<>();
                TreeSet<String> days = new TreeSet<>();
                for (Event e : u.getValue()) {
                    amounts.add(e.amount);
                    times.add(e.ts);
                    big.add(e.amount > 50);
                    days.add(Instant.ofEpochMilli(e.ts).atZone(ZoneOffset.UTC).toLocalDate().toString());  // session zone UTC
                }
                String t = "MapView<%s, Long bitmap>";
                for (Long a : amounts) {
                    x.entry("GroupAggregate", "distinctAcc_0", "map", String.format(t, "DECIMAL(10, 2)"), key, null,
                            new BigDecimal(a).setScale(2), 1L);
                    x.entry("GroupAggregate", "distinctAcc_2", "map", String.format(t, "DOUBLE"), key, null, a / 4.0, 1L);
                }
                for (Long ts : times) x.entry("GroupAggregate", "distinctAcc_1", "map", String.format(t, "TIMESTAMP_LTZ(3)"), key,
                        null, new Expect.Raw("{\"type\": \"timestamp_ltz\", \"value\": \"" + Instant.ofEpochMilli(ts)
                                + "\", \"epoch_ms\": " + ts + "}"), 1L);
                for (Boolean b : big) x.entry("GroupAggregate", "distinctAcc_3", "map", String.format(t, "BOOLEAN"), key, null, b, 1L);
                for (String d : days) x.entry("GroupAggregate", "distinctAcc_4", "map", String.format(t, "DATE"), key, null,
                        new Expect.Raw("{\"type\": \"local_date\", \"value\": \"" + d + "\"}"), 1L);
                x.entry("GroupAggregate", "accState", "value", "Row(5 counts, 5 distinct views)", key, null, null,
                        row((long) amounts.size(), (long) times.size(), (long) amounts.size(), (long) big.size(), (long) days.size(),
                                dataView(), dataView(), dataView(), dataView(), dataView()));
            }
            return;
        }
        if (variant.equals("window")) {
            for (Map.Entry<String, List<Event>> u : users.entrySet()) {
                TreeMap<Long, List<Event>> windows = new TreeMap<>();
                for (Event e : u.getValue()) windows.computeIfAbsent(e.ts - Math.floorMod(e.ts, SQL_WINDOW) + SQL_WINDOW,
                        w -> new ArrayList<>()).add(e);
                for (Map.Entry<Long, List<Event>> w : windows.entrySet()) {
                    TreeSet<String> cats = new TreeSet<>();
                    TreeSet<Long> amounts = new TreeSet<>();
                    for (Event e : w.getValue()) { cats.add(e.category); amounts.add(e.amount); }
                    // the namespace: the window's end (epoch ms), as the slicing window operator keys its state
                    for (String c : cats) x.entry("GlobalWindowAggregate", "distinctAcc_0", "map", "MapView<category, Long bitmap>",
                            rowKey(u.getKey()), w.getKey(), c, 1L);
                    for (Long a : amounts) x.entry("GlobalWindowAggregate", "distinctAcc_1", "map", "MapView<amount, Long bitmap>",
                            rowKey(u.getKey()), w.getKey(), a, 1L);
                    x.entry("GlobalWindowAggregate", "window-aggs", "value", "Row(count distinct x2, count, distinct views)",
                            rowKey(u.getKey()), w.getKey(), null, row((long) cats.size(), (long) amounts.size(),
                                    (long) w.getValue().size(), dataView(), dataView()));
                }
            }
            return;
        }
        if (variant.equals("split")) {
            // the partial aggregate's accumulators live in the mini-batch only: its state is the distinct view, keyed
            // by (user, bucket); the final aggregate keeps (SUM0 of the partial counts, SUM of the partial sums)
            String partial = "IncrementalGroupAggregate", fin = "GlobalGroupAggregate";
            for (Map.Entry<String, List<Event>> u : users.entrySet()) {
                TreeMap<Integer, TreeSet<Long>> buckets = new TreeMap<>();
                long sum = 0;
                for (Event e : u.getValue()) {
                    int b = Long.hashCode(e.amount) % 1024;  // the planner's MOD(HASH_CODE(amount), 1024)
                    buckets.computeIfAbsent(b, z -> new TreeSet<>()).add(e.amount);
                    sum += e.amount;
                }
                for (Map.Entry<Integer, TreeSet<Long>> b : buckets.entrySet()) {
                    Object pk = rowKey(u.getKey(), b.getKey());
                    for (Long a : b.getValue()) {
                        x.entry(partial, "distinctAcc_0", "map", "MapView<amount, Long bitmap>", pk, null, a, 1L);
                    }
                }
                long distinct = 0;
                for (TreeSet<Long> s : buckets.values()) distinct += s.size();
                x.entry(fin, "accState", "value", "Row(sum0 of partial counts, sum of partial sums)",
                        rowKey(u.getKey()), null, null, row(distinct, sum));
            }
            return;
        }
        // (Flink 1.x metadata stores no operator names: the reader names the operator from its states, GroupAggregate)
        boolean named = !org.apache.flink.runtime.util.EnvironmentInformation.getVersion().startsWith("1.");
        String op = variant.equals("minibatch") && named ? "GlobalGroupAggregate" : "GroupAggregate";
        for (Map.Entry<String, List<Event>> u : users.entrySet()) {
            Object key = rowKey(u.getKey());
            TreeSet<Integer> b = new TreeSet<>();
            TreeSet<Long> amounts = new TreeSet<>();
            TreeMap<String, Long> catBits = new TreeMap<>();
            TreeSet<Integer> opts = new TreeSet<>();
            boolean optNull = false;
            for (Event e : u.getValue()) {
                b.add(bucket(e));
                amounts.add(e.amount);
                catBits.merge(e.category, e.amount >= 50 ? 1L : 2L, (p, q) -> p | q);  // bit i: FILTER of aggregate i
                if (opt(e) == null) optNull = true; else opts.add(opt(e));
            }
            String type = "MapView<%s, Long bitmap of the aggregates that saw it>";
            for (Integer v : b) x.entry(op, "distinctAcc_0", "map", String.format(type, "INT bucket"), key, null, v, 3L);
            for (Long v : amounts) x.entry(op, "distinctAcc_1", "map", String.format(type, "BIGINT amount"), key, null, v, 1L);
            for (Map.Entry<String, Long> c : catBits.entrySet()) {
                x.entry(op, "distinctAcc_2", "map", String.format(type, "STRING category"), key, null, c.getKey(), c.getValue());
            }
            for (Integer v : opts) x.entry(op, "distinctAcc_3", "map", String.format(type, "INT opt"), key, null, v, 1L);
            if (optNull) x.entry(op, "distinctAcc_3_null_state", "value", "Long bitmap of the NULL key", key, null, null, 1L);
            long big = catBits.values().stream().filter(v -> (v & 1) != 0).count();
            long small = catBits.values().stream().filter(v -> (v & 2) != 0).count();
            int bsum = 0;
            for (Integer v : b) bsum += v;
            x.entry(op, "accState", "value", "Row(6 aggregate accumulators, 4 distinct views)", key, null, null,
                    row((long) b.size(), (long) amounts.size(), big, small, bsum, (long) opts.size(),
                            dataView(), dataView(), dataView(), dataView()));
        }
    }

    // ------------------------------------------------------------------ driver ------------------------------
    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable t) {  // the mini cluster's threads would keep a failed JVM (and its caller) waiting
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String[] args) throws Exception {
        Path outRoot = Paths.get(args[0]);
        String name = args[1], job = args[2], backend = args[3], mode = args[4];
        boolean changelog = Boolean.getBoolean("fixtures.changelog");
        boolean fileMerging = Boolean.getBoolean("fixtures.filemerging");
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
        conf.put("execution.checkpointing.file-merging.enabled", Boolean.toString(fileMerging));
        // the same settings under their Flink 1.x names (1.17-1.19 read only these)
        conf.put("state.backend", backend);
        conf.put("state.checkpoints.dir", work.resolve("checkpoints").toUri().toString());
        conf.put("state.savepoints.dir", work.resolve("savepoints").toUri().toString());
        conf.put("state.backend.incremental", Boolean.toString(mode.equals("incremental")));
        conf.put("state.checkpoints.num-retained", "1");
        if (changelog) {
            conf.put("state.changelog.enabled", "true");
            conf.put("state.changelog.storage", "filesystem");
            // inside the job's shared/ folder, so the fixture is one self-contained folder
            conf.put("state.changelog.dstl.dfs.base-path", jobDir.resolve("shared").resolve("changelog").toUri().toString());
            // default 1 h: nothing materialized yet, all state is in the changelog; a short interval gives a
            // materialized snapshot with the changelog applied on top
            conf.put("state.changelog.periodic-materialize.interval", System.getProperty("fixtures.materialize", "1 h"));
        }
        if (backend.equals("forst")) {
            conf.put("state.backend.forst.local-dir", work.resolve("forst-local").toString());
        }
        conf.put("taskmanager.numberOfTaskSlots", "8");
        conf.put("rest.bind-port", "0");
        conf.put("pipeline.max-parallelism", "128");
        conf.put("state.backend.rocksdb.memory.managed", "true");
        conf.put("taskmanager.memory.managed.size", "256m");
        conf.put("table.exec.state.ttl", "0 ms");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        env.setParallelism(2);
        env.setMaxParallelism(128);
        if (checkpointMode) env.enableCheckpointing(300);

        final boolean sql = job.startsWith("sql");
        // a sequence source (the same API in Flink 1.17 to 2.x) that idles after the last event, so the job keeps
        // running until the snapshot is taken
        DataStream<Event> stream = env.fromSequence(0, Long.MAX_VALUE).setParallelism(1).uid("sequence").name("sequence")
                .flatMap((Long i, Collector<Event> out) -> {
                    if (i < EVENTS) out.collect(event(i));
                    else Thread.sleep(20);
                }).returns(TypeInformation.of(Event.class)).setParallelism(1).uid("events").name("events")
                .assignTimestampsAndWatermarks(WatermarkStrategy.<Event>noWatermarks().withTimestampAssigner((e, t) -> e.ts))
                .setParallelism(1).uid("timestamps").name("timestamps");
        long expectedOps;
        TableResult sqlResult = null;
        Expect x = new Expect();
        switch (job) {
            case "plain": {
                stream.keyBy(e -> e.user, Types.STRING).process(new PlainFunction()).uid("user-activity").name("user-activity");
                stream.keyBy(e -> e.category, Types.STRING).window(TumblingEventTimeWindows.class.cast(timed(null, TumblingEventTimeWindows.class, "of", 60_000L)))
                        .aggregate(new CountAgg()).uid("category-windows").name("category-windows");
                expectedOps = 2L * EVENTS;
                expectPlain(x);
                break;
            }
            case "types": {
                stream.keyBy(e -> e.user, Types.STRING).process(new TypesFunction()).uid("user-types").name("user-types");
                expectedOps = EVENTS;
                expectTypes(x);
                break;
            }
            case "windows": {
                KeyedStream<Event, String> byUser = stream.keyBy(e -> e.user, Types.STRING);
                stream.map(e -> Tuple2.of(e.user, e.amount)).returns(Types.TUPLE(Types.STRING, Types.LONG))
                        .uid("to-tuples").name("to-tuples")
                        .keyBy(t -> t.f0, Types.STRING).window(TumblingEventTimeWindows.class.cast(timed(null, TumblingEventTimeWindows.class, "of", TUMBLE)))
                        .reduce((a, b) -> { PROCESSED.incrementAndGet(); return Tuple2.of(a.f0, a.f1 + b.f1); })
                        .uid("tumbling-reduce").name("tumbling-reduce");
                byUser.window(SlidingEventTimeWindows.class.cast(timed(null, SlidingEventTimeWindows.class, "of", SLIDE_SIZE, SLIDE)))
                        .aggregate(new AvgAgg()).uid("sliding-aggregate").name("sliding-aggregate");
                byUser.window(EventTimeSessionWindows.class.cast(timed(null, EventTimeSessionWindows.class, "withGap", GAP))).process(new SessionSummary())
                        .uid("session-process").name("session-process");
                byUser.countWindow(COUNT).aggregate(new CountSum()).uid("count-window").name("count-window");
                // reduce counts once per element after the first of a window, AvgAgg 3x, CountSum 1x: wait on time instead
                expectedOps = -1;
                expectWindows(x);
                break;
            }
            case "joins": {
                KeyedStream<Event, String> left = stream.filter(e -> e.seq % 2 == 0).uid("left-orders").name("left-orders")
                        .keyBy(e -> e.user, Types.STRING);
                KeyedStream<Event, String> right = stream.filter(e -> e.seq % 2 == 1).uid("right-payments").name("right-payments")
                        .keyBy(e -> e.user, Types.STRING);
                KeyedStream.IntervalJoined.class.cast(timed(left.intervalJoin(right), KeyedStream.IntervalJoin.class, "between",
                        -5000L, 5000L)).process(new NoJoin())
                        .uid("interval-join").name("interval-join");
                Pattern<Event, ?> p = Pattern.<Event>begin("big").where(SimpleCondition.of(ProductionFixtures::isBig))
                        .next("small").where(SimpleCondition.of(ProductionFixtures::isSmall));
                PatternStream<Event> ps = CEP.pattern(stream.keyBy(e -> e.user, Types.STRING), p).inProcessingTime();
                ps.process(new PatternProcessFunction<Event, String>() {
                    @Override
                    public void processMatch(Map<String, List<Event>> m, Context ctx, Collector<String> out) {}
                }).uid("cep-big-then-small").name("cep-big-then-small");
                expectedOps = -1;
                expectJoins(x);
                break;
            }
            case "sql": {
                StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
                DataStream<Row> rows = stream.map(e -> Row.of(e.user, e.category, e.amount, e.seq, Instant.ofEpochMilli(e.ts)))
                        .returns(Types.ROW_NAMED(new String[] {"user_name", "category", "amount", "seq", "ts"},
                                Types.STRING, Types.STRING, Types.LONG, Types.LONG, Types.INSTANT))
                        .uid("to-rows").name("to-rows");
                tEnv.createTemporaryView("events", tEnv.fromDataStream(rows, Schema.newBuilder()
                        .columnByExpression("rt", "CAST(ts AS TIMESTAMP_LTZ(3))")
                        .watermark("rt", "rt - INTERVAL '1' DAY").build()));
                for (String t : new String[] {"distinct_sink (user_name STRING, cats BIGINT, cnt BIGINT, PRIMARY KEY (user_name) NOT ENFORCED)",
                        "join_sink (user_name STRING, amount BIGINT, first_category STRING)",
                        "ijoin_sink (user_name STRING, a BIGINT, b BIGINT)",
                        "topn_sink (category STRING, user_name STRING, amount BIGINT, rn BIGINT)",
                        "dedup_sink (user_name STRING, category STRING, amount BIGINT, seq BIGINT, rt TIMESTAMP_LTZ(3))",
                        "match_sink (user_name STRING, big_seq BIGINT, small_seq BIGINT)"}) {
                    tEnv.executeSql("CREATE TABLE " + t + " WITH ('connector' = 'blackhole')");
                }
                StatementSet set = tEnv.createStatementSet();
                set.addInsertSql("INSERT INTO distinct_sink SELECT user_name, COUNT(DISTINCT category), COUNT(*) FROM events GROUP BY user_name");
                set.addInsertSql("INSERT INTO join_sink SELECT a.user_name, a.amount, b.category FROM "
                        + "(SELECT * FROM events WHERE MOD(seq, 2) = 0) a JOIN (SELECT * FROM events WHERE MOD(seq, 2) = 1) b "
                        + "ON a.user_name = b.user_name");
                set.addInsertSql("INSERT INTO ijoin_sink SELECT a.user_name, a.seq, b.seq FROM events a, events b "
                        + "WHERE a.user_name = b.user_name AND a.category = 'books' AND b.category = 'games' "
                        + "AND a.rt BETWEEN b.rt - INTERVAL '5' SECOND AND b.rt");
                set.addInsertSql("INSERT INTO topn_sink SELECT category, user_name, amount, rn FROM (SELECT *, ROW_NUMBER() OVER "
                        + "(PARTITION BY category ORDER BY amount DESC) AS rn FROM events) WHERE rn <= 3");
                set.addInsertSql("INSERT INTO dedup_sink SELECT user_name, category, amount, seq, rt FROM (SELECT *, ROW_NUMBER() OVER "
                        + "(PARTITION BY user_name ORDER BY rt ASC) AS rn FROM events) WHERE rn = 1");
                set.addInsertSql("INSERT INTO match_sink SELECT * FROM events MATCH_RECOGNIZE (PARTITION BY user_name ORDER BY rt "
                        + "MEASURES A.seq AS big_seq, B.seq AS small_seq ONE ROW PER MATCH AFTER MATCH SKIP PAST LAST ROW "
                        + "PATTERN (A B) DEFINE A AS A.amount >= 80, B AS B.amount < 20)");
                sqlResult = set.execute();
                expectedOps = -1;
                expectSql(x);
                break;
            }
            case "sqlagg": {
                StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
                DataStream<Row> rows = stream.map(e -> Row.of(e.user, e.category, e.amount))
                        .returns(Types.ROW_NAMED(new String[] {"user_name", "category", "amount"}, Types.STRING, Types.STRING, Types.LONG))
                        .setParallelism(1)  // one upstream subtask: each user's rows reach the aggregate in input order
                        .uid("to-rows").name("to-rows");                                 // (LISTAGG, LAST_VALUE)
                tEnv.createTemporaryView("events", tEnv.fromDataStream(rows));
                tEnv.executeSql("CREATE TABLE agg_sink (user_name STRING, cats BIGINT, cnt BIGINT, mx BIGINT, cat_list STRING, "
                        + "last_cat STRING, PRIMARY KEY (user_name) NOT ENFORCED) WITH ('connector' = 'blackhole')");
                StatementSet set = tEnv.createStatementSet();
                set.addInsertSql(SQLAGG);
                sqlResult = set.execute();
                expectedOps = -1;
                expectSqlAgg(x);
                break;
            }
            case "sqldistinct": {
                String variant = System.getProperty("fixtures.sqlvariant", "plain");
                StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
                if (variant.equals("minibatch") || variant.equals("split") || variant.equals("window")) {
                    tEnv.getConfig().set("table.exec.mini-batch.enabled", "true");
                    tEnv.getConfig().set("table.exec.mini-batch.allow-latency", "200 ms");
                    tEnv.getConfig().set("table.exec.mini-batch.size", "50");
                    tEnv.getConfig().set("table.optimizer.agg-phase-strategy", "TWO_PHASE");
                }
                if (variant.equals("minibatch")) tEnv.getConfig().set("table.exec.state.ttl", "1 h");
                if (Boolean.getBoolean("fixtures.asyncsql")) tEnv.getConfig().set("table.exec.async-state.enabled", "true");
                if (variant.equals("split")) tEnv.getConfig().set("table.optimizer.distinct-agg.split.enabled", "true");
                DataStream<Row> rows = stream.map(e -> Row.of(e.user, e.category, e.amount, bucket(e), opt(e), e.ts))
                        .returns(Types.ROW_NAMED(new String[] {"user_name", "category", "amount", "bucket", "opt", "ts"},
                                Types.STRING, Types.STRING, Types.LONG, Types.INT, Types.INT, Types.LONG))
                        .setParallelism(1).uid("to-rows").name("to-rows");
                Schema.Builder schema = Schema.newBuilder();
                if (variant.equals("retract")) schema.columnByExpression("pt", "PROCTIME()");
                if (variant.equals("window") || variant.equals("groupwindow")) {
                    schema.columnByExpression("rt", "TO_TIMESTAMP_LTZ(ts, 3)")
                            .watermark("rt", "rt - INTERVAL '1' DAY");
                }
                tEnv.createTemporaryView("events", tEnv.fromDataStream(rows, schema.build()));
                tEnv.executeSql("CREATE TABLE dsink (user_name STRING, d_int BIGINT, d_bigint BIGINT, d_big BIGINT, "
                        + "d_small BIGINT, s_int INT, d_opt BIGINT, PRIMARY KEY (user_name) NOT ENFORCED) WITH ('connector' = 'blackhole')");
                tEnv.executeSql("CREATE TABLE ssink (user_name STRING, d BIGINT, s BIGINT, PRIMARY KEY (user_name) NOT ENFORCED) "
                        + "WITH ('connector' = 'blackhole')");
                tEnv.executeSql("CREATE TABLE rsink (category STRING, n BIGINT, big BIGINT, small BIGINT, PRIMARY KEY (category) "
                        + "NOT ENFORCED) WITH ('connector' = 'blackhole')");
                StatementSet set = tEnv.createStatementSet();
                tEnv.executeSql("CREATE TABLE gsink (user_name STRING, ws TIMESTAMP(3), cats BIGINT, cnt BIGINT) "
                        + "WITH ('connector' = 'blackhole')");
                tEnv.executeSql("CREATE TABLE tsink (user_name STRING, a BIGINT, b BIGINT, c BIGINT, d BIGINT, e BIGINT, "
                        + "PRIMARY KEY (user_name) NOT ENFORCED) WITH ('connector' = 'blackhole')");
                tEnv.executeSql("CREATE TABLE wsink (user_name STRING, ws TIMESTAMP(3), we TIMESTAMP(3), cats BIGINT, amounts BIGINT, "
                        + "cnt BIGINT) WITH ('connector' = 'blackhole')");
                set.addInsertSql(variant.equals("split") ? SQLDISTINCT_SPLIT : variant.equals("retract") ? SQLDISTINCT_RETRACT
                        : variant.equals("window") ? SQLDISTINCT_WINDOW : variant.equals("types") ? SQLDISTINCT_TYPES
                        : variant.equals("groupwindow") ? SQLDISTINCT_GROUPWINDOW : SQLDISTINCT);
                System.err.println(set.explain());
                sqlResult = set.execute();
                expectedOps = -1;
                expectSqlDistinct(x, variant);
                x.put("sql_variant", variant);
                break;
            }
            case "asyncstate": {  // Flink 2.x only: the class is compiled only against 2.x
                Class.forName("AsyncStateJob").getMethod("build", DataStream.class, Expect.class).invoke(null, stream, x);
                expectedOps = EVENTS;
                break;
            }
            default:
                throw new IllegalArgumentException("unknown job " + job);
        }

        JobClient client = sqlResult != null ? sqlResult.getJobClient().get() : env.executeAsync("fixture-" + name);
        long deadline = System.currentTimeMillis() + 300_000;
        if (expectedOps > 0) {
            while (PROCESSED.get() < expectedOps) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("job too slow: " + PROCESSED.get());
                Thread.sleep(50);
            }
        }
        // operators whose work is not counted: the source emits 480 events in well under a second; give them time
        Thread.sleep(expectedOps > 0 ? 1000 : 8000);
        Path dest = outRoot.resolve(name);
        deleteTree(dest);
        Files.createDirectories(dest.getParent());
        String kind;
        if (checkpointMode) {
            Thread.sleep(2500); // a few more checkpoints so the retained one holds the final state
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
        x.put("generator", "tools/flink/src/ProductionFixtures.java")
                .put("flink_version", org.apache.flink.runtime.util.EnvironmentInformation.getVersion())
                .put("name", name).put("job", job).put("backend", backend).put("kind", kind)
                .put("changelog", changelog).put("file_merging", fileMerging)
                .put("parallelism", 2).put("max_parallelism", 128).put("events", EVENTS)
                .put("uids", new ArrayList<>(x.ops.keySet()))
                .put("operator_match", sql ? "name-prefix" : "uid");
        x.write(dest.resolve("EXPECTED.json"));
        deleteTree(work);
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
