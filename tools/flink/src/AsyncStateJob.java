// The async state API (State V2, `KeyedStream.enableAsyncState()`, Flink 2.x only): one keyed operator with
// every state kind (Value, List, Map, Reducing, Aggregating), written through the asynchronous calls, for
// ForSt (its home backend) and HashMap. Compiled only against Flink 2.x (make_fixtures.sh); reached from
// ProductionFixtures' driver as job `asyncstate`. EXPECTED.json: every entry, computed from the input.
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.state.v2.AggregatingState;
import org.apache.flink.api.common.state.v2.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.v2.ListState;
import org.apache.flink.api.common.state.v2.ListStateDescriptor;
import org.apache.flink.api.common.state.v2.MapState;
import org.apache.flink.api.common.state.v2.MapStateDescriptor;
import org.apache.flink.api.common.state.v2.ReducingState;
import org.apache.flink.api.common.state.v2.ReducingStateDescriptor;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.state.v2.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

public class AsyncStateJob {
    static final String OP = "async-user-state";

    /** count and sum of the amounts: the aggregating state's accumulator */
    public static class CountSum implements AggregateFunction<Long, Tuple2<Long, Long>, Long> {
        public Tuple2<Long, Long> createAccumulator() { return Tuple2.of(0L, 0L); }
        public Tuple2<Long, Long> add(Long v, Tuple2<Long, Long> a) { return Tuple2.of(a.f0 + 1, a.f1 + v); }
        public Long getResult(Tuple2<Long, Long> a) { return a.f1; }
        public Tuple2<Long, Long> merge(Tuple2<Long, Long> a, Tuple2<Long, Long> b) { return Tuple2.of(a.f0 + b.f0, a.f1 + b.f1); }
    }

    public static class Fn extends KeyedProcessFunction<String, ProductionFixtures.Event, Void> {
        transient ValueState<ProductionFixtures.Stats> stats;
        transient ListState<Long> amounts;
        transient MapState<String, Long> perCat;
        transient ReducingState<Long> total;
        transient AggregatingState<Long, Long> countSum;

        @Override
        public void open(org.apache.flink.api.common.functions.OpenContext ctx) {
            stats = getRuntimeContext().getState(new ValueStateDescriptor<>("stats", TypeInformation.of(ProductionFixtures.Stats.class)));
            amounts = getRuntimeContext().getListState(new ListStateDescriptor<>("amounts", Types.LONG));
            perCat = getRuntimeContext().getMapState(new MapStateDescriptor<>("per_category", Types.STRING, Types.LONG));
            total = getRuntimeContext().getReducingState(new ReducingStateDescriptor<>("total", Long::sum, Types.LONG));
            countSum = getRuntimeContext().getAggregatingState(
                    new AggregatingStateDescriptor<>("count_sum", new CountSum(), Types.TUPLE(Types.LONG, Types.LONG)));
        }

        @Override
        public void processElement(ProductionFixtures.Event e, Context ctx, Collector<Void> out) {
            stats.asyncValue().thenAccept(s -> {
                ProductionFixtures.Stats n = s == null ? new ProductionFixtures.Stats() : s;
                n.count++;
                n.total += e.amount;
                n.lastCategory = e.category;
                stats.asyncUpdate(n);
            });
            amounts.asyncAdd(e.amount);
            perCat.asyncGet(e.category).thenAccept(c -> perCat.asyncPut(e.category, c == null ? 1L : c + 1));
            total.asyncAdd(e.amount);
            countSum.asyncAdd(e.amount).thenAccept(v -> ProductionFixtures.PROCESSED.incrementAndGet());
        }
    }

    /** the job's operator on `stream`, and what it must leave in state */
    public static void build(DataStream<ProductionFixtures.Event> stream, Expect x) {
        stream.keyBy(e -> e.user, Types.STRING).enableAsyncState().process(new Fn()).uid(OP).name(OP);
        x.opName(OP, OP);
        for (Map.Entry<String, List<ProductionFixtures.Event>> u : ProductionFixtures.byUser(ProductionFixtures.events()).entrySet()) {
            ProductionFixtures.Stats s = new ProductionFixtures.Stats();
            Map<String, Long> perCat = new TreeMap<>();
            String key = u.getKey();
            int i = 0;
            for (ProductionFixtures.Event e : u.getValue()) {
                s.count++;
                s.total += e.amount;
                s.lastCategory = e.category;
                perCat.merge(e.category, 1L, Long::sum);
                x.entry(OP, "amounts", "list", "List<Long>", key, null, i++, e.amount);
            }
            x.entry(OP, "stats", "value", "POJO Stats", key, null, null, s);
            x.entry(OP, "total", "reducing", "Long", key, null, null, s.total);
            x.entry(OP, "count_sum", "aggregating", "Tuple2<Long, Long> (count, sum)", key, null, null, Tuple2.of(s.count, s.total));
            for (Map.Entry<String, Long> m : perCat.entrySet()) {
                x.entry(OP, "per_category", "map", "Map<String, Long>", key, null, m.getKey(), m.getValue());
            }
        }
    }
}
