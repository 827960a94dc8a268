package io.sluice.spark;

import java.util.HashMap;
import org.apache.spark.sql.api.java.UDF1;

/**
 * A value per source partition (null for a partition not listed), looked up per row: the
 * epoch's per-partition watermark bounds. As a literal {@code map(...)[_partition]} Spark folds
 * the lookup into a {@code long} literal whenever {@code _partition} is itself a literal (a
 * files source), and that literal, different every epoch, is written into the generated code
 * (see {@link Constant}). A UDF is never folded, so the code stays the same.
 */
public final class PartitionValue implements UDF1<String, Long> {
  private static final long serialVersionUID = 1L;
  private final HashMap<String, Long> values = new HashMap<>();

  /** {@code table}: lines of {@code partition TAB value}. */
  public PartitionValue(String table) {
    for (String line : table.split("\n")) {
      if (line.isEmpty()) {
        continue;
      }
      int tab = line.lastIndexOf('\t');
      values.put(line.substring(0, tab), Long.parseLong(line.substring(tab + 1)));
    }
  }

  @Override
  public Long call(String partition) {
    return partition == null ? null : values.get(partition);
  }
}
