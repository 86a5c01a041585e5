// EXPECTED.json writer shared by the production-style fixture jobs (ProductionFixtures, VersionFixtures).
//
// Values are written self-describing, so a test can compare a decoded Python value with them without
// knowing the Java class (schema: tools/flink/README.md, "EXPECTED.json"). enc() dispatches on the
// runtime class of the value the job itself put into state.
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

public class Expect {
    /** Leaves a field out of an entry: the check does not assert it (e.g. a processing-time id). */
    public static final Object ANY = new Object();

    final Map<String, Object> top = new LinkedHashMap<>();
    // operator uid -> state name -> {"kind","type","entries"}
    final Map<String, Map<String, Map<String, Object>>> ops = new TreeMap<>();
    final Map<String, String> opNames = new TreeMap<>();

    public Expect put(String k, Object v) {
        top.put(k, v);
        return this;
    }

    public Map<String, Object> state(String uid, String name, String kind, String type) {
        Map<String, Map<String, Object>> states = ops.computeIfAbsent(uid, u -> new TreeMap<>());
        return states.computeIfAbsent(name, n -> {
            Map<String, Object> s = new LinkedHashMap<>();
            s.put("kind", kind);
            s.put("type", type);
            s.put("entries", new ArrayList<Map<String, Object>>());
            return s;
        });
    }

    public void opName(String uid, String name) {
        opNames.put(uid, name);
    }

    /** One state entry; key/namespace/userKey/value are Java values (ANY: not asserted). */
    @SuppressWarnings("unchecked")
    public void entry(String uid, String state, String kind, String type, Object key, Object namespace,
                      Object userKey, Object value) {
        if (Boolean.getBoolean("fixtures.noentries")) {  // a benchmark snapshot: the states, not every entry
            state(uid, state, kind, type);
            return;
        }
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("key", key);
        if (namespace != ANY) e.put("namespace", namespace);
        if (userKey != ANY) e.put("user_key", userKey);
        if (value != ANY) e.put("value", value);
        ((List<Map<String, Object>>) state(uid, state, kind, type).get("entries")).add(e);
    }

    public void write(Path file) throws Exception {
        StringBuilder b = new StringBuilder("{\n");
        for (Map.Entry<String, Object> e : top.entrySet()) {
            b.append(" ").append(str(e.getKey())).append(": ").append(enc(e.getValue())).append(",\n");
        }
        b.append(" \"operators\": {");
        boolean f1 = true;
        for (Map.Entry<String, Map<String, Map<String, Object>>> op : ops.entrySet()) {
            b.append(f1 ? "\n" : ",\n").append("  ").append(str(op.getKey())).append(": {\"name\": ")
                    .append(str(opNames.getOrDefault(op.getKey(), op.getKey()))).append(", \"states\": {");
            f1 = false;
            boolean f2 = true;
            for (Map.Entry<String, Map<String, Object>> st : op.getValue().entrySet()) {
                Map<String, Object> s = st.getValue();
                b.append(f2 ? "\n" : ",\n").append("   ").append(str(st.getKey())).append(": {\"kind\": ")
                        .append(str((String) s.get("kind"))).append(", \"type\": ").append(str((String) s.get("type")))
                        .append(", \"entries\": [");
                f2 = false;
                boolean f3 = true;
                @SuppressWarnings("unchecked")
                List<Map<String, Object>> entries = (List<Map<String, Object>>) s.get("entries");
                for (Map<String, Object> en : entries) {
                    b.append(f3 ? "\n" : ",\n").append("    {");
                    f3 = false;
                    boolean f4 = true;
                    for (Map.Entry<String, Object> kv : en.entrySet()) {
                        b.append(f4 ? "" : ", ").append(str(kv.getKey())).append(": ").append(enc(kv.getValue()));
                        f4 = false;
                    }
                    b.append("}");
                }
                b.append("]}");
            }
            b.append("}}");
        }
        b.append("\n }\n}\n");
        Files.write(file, b.toString().getBytes(StandardCharsets.UTF_8));
    }

    static String obj(Object... kv) {
        StringBuilder b = new StringBuilder("{");
        for (int i = 0; i < kv.length; i += 2) {
            b.append(i > 0 ? ", " : "").append(str((String) kv[i])).append(": ").append((String) kv[i + 1]);
        }
        return b.append("}").toString();
    }

    /** A Java value as self-describing JSON. */
    @SuppressWarnings({"rawtypes", "unchecked"})
    public static String enc(Object v) {
        if (v == null) return "null";
        if (v instanceof Raw) return ((Raw) v).json;
        if (v instanceof String) return str((String) v);
        if (v instanceof Boolean) return v.toString();
        if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte) return v.toString();
        if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) return obj("type", str("float"), "value", str(Double.toString(d)));
            return Double.toString(d);
        }
        if (v instanceof Character) return obj("type", str("char"), "value", str(v.toString()));
        if (v instanceof Enum) return obj("type", str("enum"), "class", str(((Enum) v).getDeclaringClass().getName()),
                "value", str(((Enum) v).name()));
        if (v instanceof Instant) return obj("type", str("instant"), "value", str(v.toString()));
        if (v instanceof LocalDateTime) return obj("type", str("local_datetime"), "value", str(v.toString()));
        if (v instanceof LocalDate) return obj("type", str("local_date"), "value", str(v.toString()));
        if (v instanceof LocalTime) return obj("type", str("local_time"), "value", str(v.toString()));
        if (v instanceof java.sql.Timestamp) {
            java.sql.Timestamp t = (java.sql.Timestamp) v;
            return obj("type", str("sql_timestamp"), "value", str(t.toInstant().toString()),
                    "epoch_ms", Long.toString(t.getTime()), "nanos", Integer.toString(t.getNanos()));
        }
        if (v instanceof java.sql.Date) return obj("type", str("sql_date"), "value", str(v.toString()));
        if (v instanceof java.util.Date) {
            java.util.Date d = (java.util.Date) v;
            return obj("type", str("date"), "value", str(d.toInstant().toString()), "epoch_ms", Long.toString(d.getTime()));
        }
        if (v instanceof BigDecimal) return obj("type", str("decimal"), "value", str(((BigDecimal) v).toPlainString()));
        if (v instanceof BigInteger) return obj("type", str("biginteger"), "value", str(v.toString()));
        if (v instanceof Optional) {
            Optional o = (Optional) v;
            return obj("type", str("optional"), "present", Boolean.toString(o.isPresent()), "value", enc(o.orElse(null)));
        }
        if (v instanceof byte[]) {
            StringBuilder h = new StringBuilder();
            for (byte x : (byte[]) v) h.append(String.format("%02x", x & 0xff));
            return obj("type", str("bytes"), "hex", str(h.toString()));
        }
        if (v.getClass().isArray()) {
            Class<?> c = v.getClass().getComponentType();
            int n = java.lang.reflect.Array.getLength(v);
            StringBuilder vs = new StringBuilder("[");
            for (int i = 0; i < n; i++) vs.append(i > 0 ? ", " : "").append(enc(java.lang.reflect.Array.get(v, i)));
            return obj("type", str("array"), "element", str(c.isPrimitive() ? c.getName() : c.getSimpleName()),
                    "values", vs.append("]").toString());
        }
        if (v instanceof Collection && !(v instanceof java.util.Set)) {
            StringBuilder vs = new StringBuilder("[");
            boolean f = true;
            for (Object x : (Collection) v) {
                vs.append(f ? "" : ", ").append(enc(x));
                f = false;
            }
            return vs.append("]").toString();
        }
        if (v instanceof java.util.Set) {
            List<String> xs = new ArrayList<>();
            for (Object x : (java.util.Set) v) xs.add(enc(x));
            xs.sort(Comparator.naturalOrder());
            return obj("type", str("set"), "values", "[" + String.join(", ", xs) + "]");
        }
        if (v instanceof Map) {
            List<String> es = new ArrayList<>();
            for (Map.Entry e : ((Map<?, ?>) v).entrySet()) es.add("[" + enc(e.getKey()) + ", " + enc(e.getValue()) + "]");
            es.sort(Comparator.naturalOrder());
            return obj("type", str("map"), "entries", "[" + String.join(", ", es) + "]");
        }
        String cn = v.getClass().getName();
        if (cn.equals("org.apache.flink.types.Row")) return row((org.apache.flink.types.Row) v);
        if (cn.startsWith("org.apache.flink.api.java.tuple.Tuple")) {
            org.apache.flink.api.java.tuple.Tuple t = (org.apache.flink.api.java.tuple.Tuple) v;
            StringBuilder fs = new StringBuilder("[");
            for (int i = 0; i < t.getArity(); i++) fs.append(i > 0 ? ", " : "").append(enc(t.getField(i)));
            return obj("type", str("tuple"), "fields", fs.append("]").toString());
        }
        if (cn.equals("org.apache.flink.types.Either$Left") || cn.equals("org.apache.flink.types.Either$Right")) {
            org.apache.flink.types.Either e = (org.apache.flink.types.Either) v;
            return e.isLeft() ? obj("type", str("either"), "side", str("left"), "value", enc(e.left()))
                    : obj("type", str("either"), "side", str("right"), "value", enc(e.right()));
        }
        if (cn.equals("org.apache.flink.streaming.api.windowing.windows.TimeWindow")) {
            org.apache.flink.streaming.api.windowing.windows.TimeWindow w =
                    (org.apache.flink.streaming.api.windowing.windows.TimeWindow) v;
            return obj("type", str("time_window"), "start", Long.toString(w.getStart()), "end", Long.toString(w.getEnd()));
        }
        if (cn.equals("org.apache.flink.streaming.api.windowing.windows.GlobalWindow")) return obj("type", str("global_window"));
        // a POJO (public fields) or a Kryo class (any fields): the declared non-static fields, by name
        boolean pojo = isPojo(v.getClass());
        StringBuilder fs = new StringBuilder("{");
        boolean f = true;
        for (Field fd : fieldsOf(v.getClass())) {
            fd.setAccessible(true);
            try {
                fs.append(f ? "" : ", ").append(str(fd.getName())).append(": ").append(enc(fd.get(v)));
            } catch (IllegalAccessException ex) {
                throw new RuntimeException(ex);
            }
            f = false;
        }
        return obj("type", str(pojo ? "pojo" : "kryo"), "class", str(cn), "fields", fs.append("}").toString());
    }

    static String row(org.apache.flink.types.Row r) {
        java.util.Set<String> names = r.getFieldNames(false);
        StringBuilder fs = new StringBuilder(names != null ? "{" : "[");
        if (names != null) {
            boolean f = true;
            for (String n : names) {
                fs.append(f ? "" : ", ").append(str(n)).append(": ").append(enc(r.getField(n)));
                f = false;
            }
            fs.append("}");
        } else {
            for (int i = 0; i < r.getArity(); i++) fs.append(i > 0 ? ", " : "").append(enc(r.getField(i)));
            fs.append("]");
        }
        return obj("type", str("row"), "kind", str(r.getKind().shortString()), "fields", fs.toString());
    }

    /** Flink's POJO rule, roughly: public class, public no-arg constructor, fields public or with getters. */
    static boolean isPojo(Class<?> c) {
        if (!Modifier.isPublic(c.getModifiers())) return false;
        try {
            if (!Modifier.isPublic(c.getConstructor().getModifiers())) return false;
        } catch (NoSuchMethodException e) {
            return false;
        }
        for (Field f : fieldsOf(c)) if (!Modifier.isPublic(f.getModifiers())) return false;
        return true;
    }

    static List<Field> fieldsOf(Class<?> c) {
        List<Field> out = new ArrayList<>();
        for (Class<?> k = c; k != null && k != Object.class; k = k.getSuperclass()) {
            for (Field f : k.getDeclaredFields()) {
                if (!Modifier.isStatic(f.getModifiers()) && !Modifier.isTransient(f.getModifiers())) out.add(f);
            }
        }
        out.sort(Comparator.comparing(Field::getName));
        return out;
    }

    /** JSON written as is (an already encoded value). */
    public static final class Raw {
        final String json;

        public Raw(String json) {
            this.json = json;
        }
    }

    public static Raw timeWindow(long start, long end) {
        return new Raw(obj("type", str("time_window"), "start", Long.toString(start), "end", Long.toString(end)));
    }

    public static Raw list(Object... xs) {
        return new Raw(enc(Arrays.asList(xs)));
    }

    public static String str(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20 || c > 0x7e) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
