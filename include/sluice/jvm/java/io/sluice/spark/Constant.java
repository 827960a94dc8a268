package io.sluice.spark;

import org.apache.spark.sql.api.java.UDF0;

/**
 * A value that changes every epoch (a watermark, a horizon) as a column whose generated code
 * does not change with it. Spark writes a {@code long} literal into the Java code it generates
 * for a stage and caches the compiled class by that code's text: a new value is a new class,
 * compiled again and run cold by the JVM (interpreted until the JIT catches up), which costs an
 * epoch's pass over a million rows about 0.3 s. A UDF is called through a reference object, so
 * the code stays the same from epoch to epoch and the JIT-compiled class is reused. Registered
 * deterministic: Spark folds nothing (a UDF is never foldable) but may move it like a literal.
 */
public final class Constant implements UDF0<Long> {
  private static final long serialVersionUID = 1L;
  private final long value;

  public Constant(long value) {
    this.value = value;
  }

  @Override
  public Long call() {
    return value;
  }
}
