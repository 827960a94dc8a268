package io.sluice.spark;

import org.apache.spark.sql.api.java.UDF4;

/**
 * The largest event time of the earlier rows of the same run, in the order the task reads them
 * (null before the first). A run is the rows of one source partition and one major position
 * (a file) that one Spark task reads: Spark reads a file split front to back, so this is the
 * running maximum a watermark needs, with no sort. It is stateful, hence registered as
 * non-deterministic: Spark evaluates it once per row, where the plan puts it.
 *
 * <p>Per run it records in its {@link RunLedger}: first line (MIN), last line (MAX), smallest
 * and largest event time (MIN / MAX) and whether any row had one. Rows of a run must come in
 * increasing line order; anything else throws, so a change in how Spark feeds rows can never
 * give a silently wrong watermark.
 */
public final class PositionMax implements UDF4<String, Integer, Long, Long, Long> {
  private static final long serialVersionUID = 1L;
  public static final int FIRST_LINE = 0;
  public static final int LAST_LINE = 1;
  public static final int LOW = 2;
  public static final int HIGH = 3;
  public static final int TIMED = 4;

  private final RunLedger ledger;
  private transient String lastPartition;
  private transient int lastMajor;
  private transient long[] last;

  public PositionMax(RunLedger ledger) {
    this.ledger = ledger;
  }

  /** A ledger with this UDF's slots and merge rules. */
  public static RunLedger newLedger() {
    return new RunLedger(
        new boolean[] {false, true, false, true, true},
        new long[] {Long.MAX_VALUE, Long.MIN_VALUE, Long.MAX_VALUE, Long.MIN_VALUE, 0L});
  }

  @Override
  public Long call(String partition, Integer major, Long line, Long ts) {
    long[] s = slots(partition, major == null ? 0 : major);
    long position = line;
    if (s[LAST_LINE] != Long.MIN_VALUE && position <= s[LAST_LINE]) {
      throw new IllegalStateException(
          "sluice: rows of partition " + partition + ", major " + major + " out of order: line "
              + position + " after line " + s[LAST_LINE]);
    }
    s[LAST_LINE] = position;
    if (position < s[FIRST_LINE]) {
      s[FIRST_LINE] = position;
    }
    Long before = s[TIMED] == 0 ? null : s[HIGH];
    if (ts != null) {
      long t = ts;
      if (t < s[LOW]) {
        s[LOW] = t;
      }
      if (t > s[HIGH]) {
        s[HIGH] = t;
      }
      s[TIMED] = 1;
    }
    return before;
  }

  private long[] slots(String partition, int major) {
    if (last == null || major != lastMajor || !partition.equals(lastPartition)) {
      last = ledger.slots(Runs.key(partition, major));
      lastPartition = partition;
      lastMajor = major;
    }
    return last;
  }
}
