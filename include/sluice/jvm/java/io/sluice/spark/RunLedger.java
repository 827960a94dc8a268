package io.sluice.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.util.AccumulatorV2;

/**
 * Small per-run counters, kept by Spark as an accumulator: a run is what one task read of one
 * source partition (see {@link PositionMax}). Each run has a fixed number of long slots; two
 * values for the same run merge slot by slot with MIN or MAX. A task that Spark runs again
 * (speculation, a lost shuffle) reports the same values for the same run, so merging them again
 * changes nothing: the ledger counts every run exactly once, unlike a plain sum.
 */
public final class RunLedger extends AccumulatorV2<Object, Map<String, long[]>> {
  private static final long serialVersionUID = 1L;

  private final boolean[] takeMax;
  private final long[] zero;
  private HashMap<String, long[]> runs = new HashMap<>();

  /** {@code takeMax[i]}: slot i merges with MAX (else MIN); {@code zero[i]}: its start value. */
  public RunLedger(boolean[] takeMax, long[] zero) {
    if (takeMax.length != zero.length) {
      throw new IllegalArgumentException("one merge rule and one zero per slot");
    }
    this.takeMax = takeMax.clone();
    this.zero = zero.clone();
  }

  /** The slots of {@code run}, created at their zero values. */
  long[] slots(String run) {
    long[] found = runs.get(run);
    if (found == null) {
      found = zero.clone();
      runs.put(run, found);
    }
    return found;
  }

  @Override
  public boolean isZero() {
    return runs.isEmpty();
  }

  @Override
  public AccumulatorV2<Object, Map<String, long[]>> copy() {
    RunLedger other = new RunLedger(takeMax, zero);
    for (Map.Entry<String, long[]> e : runs.entrySet()) {
      other.runs.put(e.getKey(), e.getValue().clone());
    }
    return other;
  }

  @Override
  public void reset() {
    runs = new HashMap<>();
  }

  @Override
  public void add(Object v) {
    throw new UnsupportedOperationException("RunLedger is updated through its UDFs");
  }

  @Override
  public void merge(AccumulatorV2<Object, Map<String, long[]>> other) {
    for (Map.Entry<String, long[]> e : other.value().entrySet()) {
      long[] mine = runs.get(e.getKey());
      if (mine == null) {
        runs.put(e.getKey(), e.getValue().clone());
        continue;
      }
      long[] theirs = e.getValue();
      for (int i = 0; i < mine.length; i++) {
        mine[i] = takeMax[i] ? Math.max(mine[i], theirs[i]) : Math.min(mine[i], theirs[i]);
      }
    }
  }

  @Override
  public Map<String, long[]> value() {
    return runs;
  }

  /** Every run as {@code key \t slot0 \t slot1 ...}, one per line (one Py4J call). */
  public String dump() {
    StringBuilder out = new StringBuilder();
    for (Map.Entry<String, long[]> e : runs.entrySet()) {
      out.append(e.getKey());
      for (long v : e.getValue()) {
        out.append('\t').append(v);
      }
      out.append('\n');
    }
    return out.toString();
  }
}
