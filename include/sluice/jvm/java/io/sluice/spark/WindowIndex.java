package io.sluice.spark;

import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

/**
 * The windows one stored state part holds, as a set of 128-bit hashes of their keys kept in the
 * driver's memory, so that an epoch can tell which of its windows the state already has without
 * reading the state again (a scan of 10M stored windows costs about a second here; probing this
 * set with 10k windows costs nothing). Built from rows {@code (long h1, long h2)} (two
 * independent hashes of a window's key columns); a part is immutable, so its set never changes.
 * Open addressing over two {@code long[]} at most 3/4 full: 16 to 32 bytes per window.
 */
public final class WindowIndex {
  private final long[] first;
  private final long[] second;
  private final int mask;
  private long size;
  private boolean hasZero; // the pair (0, 0) marks an empty slot, so it is kept aside

  private WindowIndex(long expected) {
    int slots = slots(expected);
    first = new long[slots];
    second = new long[slots];
    mask = slots - 1;
  }

  private static int slots(long windows) {
    long want = Math.max(16L, windows + windows / 3 + 1);
    long slots = Long.highestOneBit(want - 1) << 1;
    if (slots > (1L << 30)) {
      throw new IllegalArgumentException("too many windows for one index: " + windows);
    }
    return (int) slots;
  }

  /** The bytes an index of {@code windows} windows takes (to decide before building it). */
  public static long bytesFor(long windows) {
    return 16L * slots(windows);
  }

  /** The JVM's maximum heap, in bytes. */
  public static long maxHeap() {
    return Runtime.getRuntime().maxMemory();
  }

  /** An index of the windows whose hashes {@code hashes} holds (one Spark job). */
  public static WindowIndex of(Dataset<Row> hashes, long expected) {
    List<long[]> chunks = collect(hashes);
    long found = 0;
    for (long[] chunk : chunks) {
      found += chunk.length / 2;
    }
    WindowIndex index = new WindowIndex(Math.max(found, expected));
    for (long[] chunk : chunks) {
      for (int i = 0; i < chunk.length; i += 2) {
        index.add(chunk[i], chunk[i + 1]);
      }
    }
    return index;
  }

  /** The hashes of {@code hashes} (one Spark job), to probe indexes with. */
  public static Probe probe(Dataset<Row> hashes) {
    return new Probe(collect(hashes));
  }

  public long size() {
    return size;
  }

  private static int slot(long h1, long h2) {
    long h = h1 * 0x9E3779B97F4A7C15L ^ h2;
    return (int) (h ^ (h >>> 29) ^ (h >>> 47));
  }

  private void add(long h1, long h2) {
    if (h1 == 0 && h2 == 0) {
      if (!hasZero) {
        hasZero = true;
        size++;
      }
      return;
    }
    int i = slot(h1, h2) & mask;
    while (first[i] != 0 || second[i] != 0) {
      if (first[i] == h1 && second[i] == h2) {
        return;
      }
      i = (i + 1) & mask;
    }
    first[i] = h1;
    second[i] = h2;
    size++;
  }

  private boolean contains(long h1, long h2) {
    if (h1 == 0 && h2 == 0) {
      return hasZero;
    }
    int i = slot(h1, h2) & mask;
    while (first[i] != 0 || second[i] != 0) {
      if (first[i] == h1 && second[i] == h2) {
        return true;
      }
      i = (i + 1) & mask;
    }
    return false;
  }

  private static List<long[]> collect(Dataset<Row> hashes) {
    return hashes.javaRDD().mapPartitions(new Pack()).collect();
  }

  /** A task's rows {@code (h1, h2)} as one flat array (one object to send, not a row each). */
  static final class Pack implements FlatMapFunction<Iterator<Row>, long[]> {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<long[]> call(Iterator<Row> rows) {
      long[] flat = new long[1024];
      int n = 0;
      while (rows.hasNext()) {
        Row row = rows.next();
        if (n + 2 > flat.length) {
          long[] bigger = new long[flat.length * 2];
          System.arraycopy(flat, 0, bigger, 0, n);
          flat = bigger;
        }
        flat[n++] = row.getLong(0);
        flat[n++] = row.getLong(1);
      }
      long[] exact = new long[n];
      System.arraycopy(flat, 0, exact, 0, n);
      return Collections.singletonList(exact).iterator();
    }
  }

  /** An epoch's windows, marked as they are found in indexes. */
  public static final class Probe {
    private final long[] hashes;
    private final boolean[] found;
    private long foundCount;

    Probe(List<long[]> chunks) {
      int total = 0;
      for (long[] chunk : chunks) {
        total += chunk.length;
      }
      hashes = new long[total];
      int at = 0;
      for (long[] chunk : chunks) {
        System.arraycopy(chunk, 0, hashes, at, chunk.length);
        at += chunk.length;
      }
      found = new boolean[total / 2];
    }

    /** Marks the windows {@code index} holds. */
    public void mark(WindowIndex index) {
      for (int i = 0; i < found.length; i++) {
        if (!found[i] && index.contains(hashes[2 * i], hashes[2 * i + 1])) {
          found[i] = true;
          foundCount++;
        }
      }
    }

    /** Windows found in any index marked so far. */
    public long found() {
      return foundCount;
    }

    /** The probed windows as an index of their own (e.g. of the part they are written to). */
    public WindowIndex index() {
      WindowIndex index = new WindowIndex(found.length);
      for (int i = 0; i < found.length; i++) {
        index.add(hashes[2 * i], hashes[2 * i + 1]);
      }
      return index;
    }

    public long size() {
      return found.length;
    }
  }
}
