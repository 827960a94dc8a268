package io.sluice.spark;

import org.apache.spark.TaskContext;
import org.apache.spark.rdd.InputFileBlockHolder;

/**
 * The key of a run: source partition, major position and the split that was read. For a file
 * split the split is its byte offset in the file (Spark packs splits into tasks differently
 * from one plan to the next, so the task number would make one split two runs when two actions
 * read the same records); for other sources (Kafka offset ranges, generated rows) it is the
 * Spark task's partition number, which the source fixes.
 */
final class Runs {
  private Runs() {}

  static String key(String partition, int major) {
    long start = InputFileBlockHolder.getStartOffset();
    String split;
    if (start >= 0) {
      split = Long.toString(start);
    } else {
      TaskContext task = TaskContext.get();
      split = Integer.toString(task == null ? -1 : task.partitionId());
    }
    return partition + '\u0001' + major + '\u0001' + split;
  }
}
