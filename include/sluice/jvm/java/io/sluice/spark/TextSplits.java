package io.sluice.spark;

import org.apache.hadoop.fs.Path;
import org.apache.spark.Partition;
import org.apache.spark.sql.execution.FileSourceScanExec;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.FilePartition;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import scala.collection.immutable.Seq;

/**
 * The file splits a scan will read, as Spark itself computed them for the plan: what {@link
 * LineInfo} needs to know which files Spark splits and where (Spark's split size depends on the
 * session's settings, the total input size and the cluster's cores).
 */
public final class TextSplits {
  private TextSplits() {}

  /**
   * Every split of the single file scan under {@code plan}, one per line: {@code path \t start
   * \t length}, the path as {@code _metadata.file_path} gives it (one Py4J call).
   */
  public static String describe(SparkPlan plan) {
    Seq<SparkPlan> leaves = plan.collectLeaves();
    FileSourceScanExec scan = null;
    for (int i = 0; i < leaves.length(); i++) {
      SparkPlan leaf = leaves.apply(i);
      if (leaf instanceof FileSourceScanExec) {
        if (scan != null) {
          throw new IllegalArgumentException("sluice: more than one file scan in " + plan);
        }
        scan = (FileSourceScanExec) leaf;
      }
    }
    if (scan == null) {
      throw new IllegalArgumentException("sluice: no file scan in " + plan);
    }
    StringBuilder out = new StringBuilder();
    for (Partition partition : scan.inputRDD().partitions()) {
      for (PartitionedFile file : ((FilePartition) partition).files()) {
        out.append(metadataPath(file))
            .append('\t')
            .append(file.start())
            .append('\t')
            .append(file.length())
            .append('\n');
      }
    }
    return out.toString();
  }

  /** The file's path as Spark's {@code _metadata.file_path} column gives it. */
  static String metadataPath(PartitionedFile file) {
    return new Path(file.filePath().toPath().toString()).toUri().toString();
  }
}
