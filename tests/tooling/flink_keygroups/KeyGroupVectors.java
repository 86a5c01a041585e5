// Prints Apache Flink's own key-group results as JSON, so that
// explorer/keygroups.py can be tested against Flink itself (not against a
// re-implementation). Run by generate.sh; output: tests/data/flink_keygroup_vectors.json
//
// Keys are described in JSON so Python can rebuild the same value:
//   {"t":"string","v":"..."}  {"t":"long","v":"-12"}  {"t":"int","v":"7"}
//   {"t":"boolean","v":true}  {"t":"double","bits":"7ff8000000000000"}
//   {"t":"tuple","f":[key-or-null, ...]}     (Flink Tuple2 / Tuple3)
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;

public class KeyGroupVectors {

    static final int[] MAX_PARALLELISMS = {1, 7, 128, 1000, 4096, 32768};

    static String jsonString(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static String describe(Object k) {
        if (k == null) return "null";
        if (k instanceof String) return "{\"t\":\"string\",\"v\":" + jsonString((String) k) + "}";
        if (k instanceof Long) return "{\"t\":\"long\",\"v\":\"" + k + "\"}";
        if (k instanceof Integer) return "{\"t\":\"int\",\"v\":\"" + k + "\"}";
        if (k instanceof Boolean) return "{\"t\":\"boolean\",\"v\":" + k + "}";
        if (k instanceof Double) {
            return "{\"t\":\"double\",\"bits\":\""
                    + Long.toHexString(Double.doubleToRawLongBits((Double) k)) + "\"}";
        }
        if (k instanceof Tuple2) {
            Tuple2<?, ?> t = (Tuple2<?, ?>) k;
            return "{\"t\":\"tuple\",\"f\":[" + describe(t.f0) + "," + describe(t.f1) + "]}";
        }
        if (k instanceof Tuple3) {
            Tuple3<?, ?, ?> t = (Tuple3<?, ?, ?>) k;
            return "{\"t\":\"tuple\",\"f\":[" + describe(t.f0) + "," + describe(t.f1) + ","
                    + describe(t.f2) + "]}";
        }
        throw new IllegalArgumentException("no description for " + k.getClass());
    }

    static String randomString(Random r) {
        int len = r.nextInt(12);
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < len; i++) {
            switch (r.nextInt(5)) {
                case 0: b.append((char) ('a' + r.nextInt(26))); break;
                case 1: b.append((char) (0x20 + r.nextInt(95))); break;
                case 2: b.append((char) (0x4e00 + r.nextInt(0x5000))); break; // CJK
                case 3: b.appendCodePoint(0x1f300 + r.nextInt(0x300)); break; // emoji: surrogate pair
                default: b.append((char) (0xa0 + r.nextInt(0x700))); break;   // Latin/Greek/Cyrillic...
            }
        }
        return b.toString();
    }

    static Object randomScalar(Random r) {
        switch (r.nextInt(5)) {
            case 0: return randomString(r);
            case 1: return r.nextLong() >> r.nextInt(64);
            case 2: return r.nextInt() >> r.nextInt(32);
            case 3: return r.nextBoolean();
            default: return r.nextGaussian() * 1000;
        }
    }

    public static void main(String[] args) {
        Random r = new Random(20240501L);
        List<Object> keys = new ArrayList<>();
        // strings
        String[] fixed = {"", "a", "hello", "Hello, World!", "user-42", "\u00e9t\u00e9",
                "\u4f60\u597d\u4e16\u754c", "\ud83d\ude00", "a\ud83c\udf89b", "\u0000",
                "\uffff", "hot-key-1", "key with spaces", "\u00df\u00e4\u00f6\u00fc"};
        for (String s : fixed) keys.add(s);
        for (int i = 0; i < 150; i++) keys.add(randomString(r));
        // longs
        long[] longs = {0L, 1L, -1L, 42L, Integer.MAX_VALUE, (long) Integer.MAX_VALUE + 1,
                Integer.MIN_VALUE, (long) Integer.MIN_VALUE - 1, 1L << 32, -(1L << 32),
                (1L << 32) - 1, Long.MAX_VALUE, Long.MIN_VALUE, Long.MIN_VALUE + 1};
        for (long v : longs) keys.add(v);
        for (int i = 0; i < 100; i++) keys.add(r.nextLong() >> r.nextInt(64));
        // ints
        int[] ints = {0, 1, -1, Integer.MAX_VALUE, Integer.MIN_VALUE, 1000, -1000};
        for (int v : ints) keys.add(v);
        for (int i = 0; i < 60; i++) keys.add(r.nextInt() >> r.nextInt(32));
        // booleans
        keys.add(true);
        keys.add(false);
        // doubles
        double[] doubles = {0.0, -0.0, Double.NaN, Double.POSITIVE_INFINITY,
                Double.NEGATIVE_INFINITY, 0.5, -0.5, 1.0 / 3, 1e300, -1e-300,
                Double.MIN_VALUE, Double.MAX_VALUE, 42.0, 3.141592653589793};
        for (double v : doubles) keys.add(v);
        for (int i = 0; i < 60; i++) keys.add(r.nextGaussian() * Math.pow(10, r.nextInt(20) - 10));
        // tuples, including null fields
        keys.add(Tuple2.of("a", 1L));
        keys.add(Tuple2.of(null, 1L));
        keys.add(Tuple2.of("a", null));
        keys.add(Tuple2.of(null, null));
        keys.add(Tuple3.of("x", 2, true));
        keys.add(Tuple3.of(null, 2.5, null));
        for (int i = 0; i < 40; i++) keys.add(Tuple2.of(randomScalar(r), randomScalar(r)));
        for (int i = 0; i < 40; i++) {
            keys.add(Tuple3.of(randomScalar(r), r.nextInt(10) == 0 ? null : randomScalar(r), randomScalar(r)));
        }

        StringBuilder out = new StringBuilder();
        out.append("{\n\"generator\": \"tests/tooling/flink_keygroups/KeyGroupVectors.java\",\n");
        out.append("\"flink_version\": \"").append(org.apache.flink.runtime.util.EnvironmentInformation.getVersion()).append("\",\n");
        out.append("\"max_parallelisms\": [");
        for (int i = 0; i < MAX_PARALLELISMS.length; i++) out.append(i > 0 ? ", " : "").append(MAX_PARALLELISMS[i]);
        out.append("],\n\"keys\": [\n");
        for (int i = 0; i < keys.size(); i++) {
            Object k = keys.get(i);
            out.append(" {\"key\": ").append(describe(k));
            out.append(", \"hash_code\": ").append(k.hashCode());
            out.append(", \"key_groups\": [");
            for (int j = 0; j < MAX_PARALLELISMS.length; j++) {
                out.append(j > 0 ? ", " : "").append(KeyGroupRangeAssignment.assignToKeyGroup(k, MAX_PARALLELISMS[j]));
            }
            out.append("]}").append(i + 1 < keys.size() ? ",\n" : "\n");
        }
        out.append("],\n\"operator_ranges\": [\n");
        int[] parallelisms = {1, 2, 3, 5, 7, 16, 100, 128, 1000};
        boolean first = true;
        for (int maxP : MAX_PARALLELISMS) {
            for (int p : parallelisms) {
                if (p > maxP) continue;
                out.append(first ? "" : ",\n");
                first = false;
                out.append(" {\"max_parallelism\": ").append(maxP).append(", \"parallelism\": ").append(p);
                out.append(", \"ranges\": [");
                for (int i = 0; i < p; i++) {
                    KeyGroupRange g = KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(maxP, p, i);
                    out.append(i > 0 ? ", " : "").append("[").append(g.getStartKeyGroup()).append(", ")
                            .append(g.getEndKeyGroup()).append("]");
                }
                // owner of a sample of key groups: every one for small maxP, a stride plus edges otherwise
                out.append("], \"owners\": [");
                int step = Math.max(1, maxP / 257);
                boolean f2 = true;
                for (int kg = 0; kg < maxP; kg += step) {
                    out.append(f2 ? "" : ", ").append("[").append(kg).append(", ")
                            .append(KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup(maxP, p, kg)).append("]");
                    f2 = false;
                }
                out.append(", [").append(maxP - 1).append(", ")
                        .append(KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup(maxP, p, maxP - 1)).append("]");
                out.append("]}");
            }
        }
        out.append("\n],\n\"default_max_parallelism\": [");
        int[] ps = {1, 2, 3, 10, 50, 64, 85, 86, 100, 128, 200, 1000, 4096, 10000, 21845, 21846, 32768};
        for (int i = 0; i < ps.length; i++) {
            out.append(i > 0 ? ", " : "").append("[").append(ps[i]).append(", ")
                    .append(KeyGroupRangeAssignment.computeDefaultMaxParallelism(ps[i])).append("]");
        }
        out.append("]\n}\n");
        System.out.print(out);
    }
}
