// The next version of ProductionFixtures.Stats (issue 32, explorer.compatible against a real restore): the POJO
// gains a field. Built alone into a jar (restore_check.sh) that RestoreCheck's "+without:stats-v2" job version
// ships as its user jar; Flink's child-first user class loader then sees this Stats, not the one on the classpath,
// and migrates the savepoint's Stats values into it on restore.
public class ProductionFixtures {
    public static class Stats {
        public long count;
        public long total;
        public String lastCategory;
        public String tier;  // added in this version: restored values start null
        public Stats() {}
    }
}
