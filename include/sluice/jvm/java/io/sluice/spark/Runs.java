package io.sluice.spark;

import org.apache.spark.TaskContext;

/** The key of a run: source partition, major position and the Spark task that read it. */
final class Runs {
  private Runs() {}

  static String key(String partition, int major) {
    TaskContext task = TaskContext.get();
    int split = task == null ? -1 : task.partitionId();
    return partition + '\u0001' + major + '\u0001' + split;
  }
}
