package io.sluice.spark;

import org.apache.spark.TaskContext;

/**
 * The key of a run: source partition, major position and where the run begins. A run is the
 * rows of one partition and major position (a file) that one Spark task reads, front to back:
 * for a file, one split. It begins at the line of its first row, which is the same in every
 * plan over the same records, whereas the task that reads a split is not (Spark packs splits
 * into tasks anew for each action), so two actions over the same records report the same runs.
 * Without lines (a write's row counter) the run is the task, within one action.
 */
final class Runs {
  private Runs() {}

  static String key(String partition, int major, Long firstLine) {
    long begins;
    if (firstLine != null) {
      begins = firstLine;
    } else {
      TaskContext task = TaskContext.get();
      begins = task == null ? -1 : task.partitionId();
    }
    return partition + '\u0001' + major + '\u0001' + begins;
  }
}
