package io.sluice.spark;

import org.apache.spark.sql.api.java.UDF5;

/**
 * Counts the rows of each class per run (see {@link PositionMax}) and returns the class as is,
 * so it sits on the path of every row. Classes are small integers ({@code 0 .. CLASSES-1}); the
 * last slot sums a per-row count (the windows a late or partly late record missed). Merged by
 * MAX per run, so a task Spark runs twice is counted once.
 *
 * <p>{@code anchor} is not used: passing a column makes Spark evaluate it for every row that
 * is counted (Spark drops a non-deterministic column nothing reads, such as a {@link
 * PositionMax} whose ledger alone is wanted).
 */
public final class ClassTally implements UDF5<String, Integer, Integer, Integer, Long, Integer> {
  private static final long serialVersionUID = 1L;
  public static final int CLASSES = 5;

  private final RunLedger ledger;
  private transient String lastPartition;
  private transient int lastMajor;
  private transient long[] last;

  public ClassTally(RunLedger ledger) {
    this.ledger = ledger;
  }

  public static RunLedger newLedger() {
    boolean[] takeMax = new boolean[CLASSES + 1];
    java.util.Arrays.fill(takeMax, true);
    return new RunLedger(takeMax, new long[CLASSES + 1]);
  }

  @Override
  public Integer call(String partition, Integer major, Integer code, Integer extra, Long anchor) {
    int m = major == null ? 0 : major;
    if (last == null || m != lastMajor || !partition.equals(lastPartition)) {
      last = ledger.slots(Runs.key(partition, m));
      lastPartition = partition;
      lastMajor = m;
    }
    last[code] += 1;
    if (extra != null) {
      last[CLASSES] += extra;
    }
    return code;
  }
}
