package io.sluice.spark;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * The UDFs as columns, built here rather than from Python: {@code functions.udf} is
 * overloaded for every arity and for untyped Scala functions, and Py4J's choice between
 * the overloads is not stable; here the compiler chooses. Each call is one Py4J call.
 */
public final class Udfs {
  private Udfs() {}

  public static Column positionMax(
      RunLedger ledger, Column partition, Column major, Column line, Column ts) {
    UserDefinedFunction udf =
        functions.udf(new PositionMax(ledger), DataTypes.LongType).asNondeterministic();
    return udf.apply(partition, major, line, ts);
  }

  /** {@code value} as a column Spark cannot fold into its generated code ({@link Constant}). */
  public static Column constant(long value) {
    UserDefinedFunction udf =
        functions.udf(new Constant(value), DataTypes.LongType).asNonNullable();
    return udf.apply();
  }

  /** The value of each row's partition ({@link PartitionValue}). */
  public static Column partitionValue(String table, Column partition) {
    UserDefinedFunction udf = functions.udf(new PartitionValue(table), DataTypes.LongType);
    return udf.apply(partition);
  }

  public static Column classTally(
      RunLedger ledger, Column partition, Column major, Column line, Column code, Column extra,
      Column anchor) {
    UserDefinedFunction udf =
        functions.udf(new ClassTally(ledger), DataTypes.IntegerType).asNondeterministic();
    return udf.apply(partition, major, line, code, extra, anchor);
  }
}
