package io.sluice.spark;

import java.util.Map;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * An epoch's plan from SQL text, one Py4J call per step. PySpark sends a select list one
 * element at a time (a Python list becomes a Java list by one call per element, a {@code
 * Column} costs a call per function and alias); here the list travels as one string, split by
 * {@link #SEPARATOR}. The helper UDFs are registered under names the caller chooses, so SQL
 * text can call them; a name is dropped once the plans that use it are analysed (an analysed
 * plan holds the function itself, not its name).
 */
public final class Plans {
  /** Between the expressions of a select list (ASCII unit separator: not in SQL text). */
  public static final String SEPARATOR = "\u001f";

  private Plans() {}

  /** {@code frame.selectExpr(expressions split by SEPARATOR)}. */
  public static Dataset<Row> select(Dataset<Row> frame, String expressions) {
    return frame.selectExpr(expressions.split(SEPARATOR, -1));
  }

  /**
   * {@code frame.groupBy(keys).agg(aggregates)}, each list SQL text split by SEPARATOR (no
   * keys: an empty string).
   */
  public static Dataset<Row> aggregate(Dataset<Row> frame, String keys, String aggregates) {
    Column[] by = expressions(keys);
    Column[] all = expressions(aggregates);
    Column[] rest = java.util.Arrays.copyOfRange(all, 1, all.length);
    return frame.groupBy(by).agg(all[0], rest);
  }

  private static Column[] expressions(String list) {
    if (list.isEmpty()) {
      return new Column[0];
    }
    String[] texts = list.split(SEPARATOR, -1);
    Column[] columns = new Column[texts.length];
    for (int i = 0; i < texts.length; i++) {
      columns[i] = functions.expr(texts[i]);
    }
    return columns;
  }

  /** A ledger for {@code kind} ({@code PositionMax} or {@code ClassTally}), registered. */
  public static RunLedger ledger(SparkSession session, String kind) {
    RunLedger ledger =
        switch (kind) {
          case "PositionMax" -> PositionMax.newLedger();
          case "ClassTally" -> ClassTally.newLedger();
          default -> throw new IllegalArgumentException("no ledger kind " + kind);
        };
    session.sparkContext().register(ledger, "sluice-" + kind);
    return ledger;
  }

  /** {@link PositionMax} as the SQL function {@code name}. */
  public static void positionMax(SparkSession session, String name, RunLedger ledger) {
    register(
        session,
        name,
        functions.udf(new PositionMax(ledger), DataTypes.LongType).asNondeterministic());
  }

  /** {@link ClassTally} as the SQL function {@code name}. */
  public static void classTally(SparkSession session, String name, RunLedger ledger) {
    register(
        session,
        name,
        functions.udf(new ClassTally(ledger), DataTypes.IntegerType).asNondeterministic());
  }

  /** {@link Constant} {@code value} as the SQL function {@code name()}. */
  public static void constant(SparkSession session, String name, long value) {
    register(session, name, functions.udf(new Constant(value), DataTypes.LongType).asNonNullable());
  }

  /** {@link PartitionValue} of {@code table} as the SQL function {@code name(partition)}. */
  public static void partitionValue(SparkSession session, String name, String table) {
    register(session, name, functions.udf(new PartitionValue(table), DataTypes.LongType));
  }

  /** {@link LineInfo#function} as the SQL function {@code name(path, block start, bytes)}. */
  public static void lineInfo(
      SparkSession session, String name, boolean json, Map<String, ? extends Map<?, ?>> before) {
    register(session, name, LineInfo.function(json, before));
  }

  /** {@code frame.select(columns)}: a select list built once and kept as a Java object. */
  public static Dataset<Row> select(Dataset<Row> frame, Column[] columns) {
    return frame.select(columns);
  }

  /** Drop the functions {@code names} (separated by SEPARATOR) of the session. */
  public static void drop(SparkSession session, String names) {
    for (String name : names.split(SEPARATOR)) {
      if (!name.isEmpty()) {
        session.sessionState().catalog().dropTempFunction(name, true);
      }
    }
  }

  private static void register(SparkSession session, String name, UserDefinedFunction udf) {
    session.udf().register(name, udf);
  }
}
