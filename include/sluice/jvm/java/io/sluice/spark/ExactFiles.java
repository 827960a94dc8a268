package io.sluice.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.util.CaseInsensitiveMap$;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.datasources.FileFormat;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.InMemoryFileIndex;
import org.apache.spark.sql.execution.datasources.NoopCache$;
import org.apache.spark.sql.avro.AvroFileFormat;
import org.apache.spark.sql.execution.datasources.orc.OrcFileFormat;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.datasources.text.TextFileFormat;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A DataFrame over exactly the files named, each read once, whatever its name holds.
 *
 * <p>{@code spark.read.text(paths)} takes every path holding one of {@code {}[]*?\} as a Hadoop
 * glob pattern: {@code a*.jsonl} also reads {@code ab.jsonl}, {@code [x].jsonl} reads {@code
 * x.jsonl} or nothing, and globbing lists the folder, which fails on a name with a colon. Its
 * internal switch {@code __globPaths__=false} lists every path once per such path (Spark 4.2:
 * {@code checkAndGlobPathIfNecessary} returns all paths for each glob path), so a file is read
 * several times. Here the relation is built as {@code DataSource} builds it, without the glob
 * step: an {@link InMemoryFileIndex} over the paths as Hadoop {@link Path}s, then a check that
 * it lists each path exactly once, as the file it names.
 */
public final class ExactFiles {
  private ExactFiles() {}

  /**
   * The files {@code paths} (URIs as Hadoop's {@code new Path(String)} takes them: not
   * percent-escaped) read by {@code format} ({@code text}, {@code lines} ({@link
   * CompressedLines}), {@code parquet}, {@code orc} or {@code avro}) with {@code options}
   * (reader and Hadoop settings). {@code schemaDdl}: the data schema as DDL or as Spark's JSON
   * ({@code {"type":"struct",...}}); null: the format's (text) or inferred from the files.
   * Throws {@link FileNotFoundException} naming a path that is missing or is not one file.
   */
  public static Dataset<Row> read(
      SparkSession spark,
      String format,
      List<String> paths,
      Map<String, String> options,
      String schemaDdl)
      throws IOException {
    FileFormat fileFormat = fileFormat(format);
    scala.collection.immutable.Map<String, String> opts = caseInsensitive(options);
    List<Path> roots = roots(paths);
    InMemoryFileIndex index = index(spark, roots, opts);
    StructType schema = schema(spark, fileFormat, format, schemaDdl, opts, index);
    HadoopFsRelation relation =
        new HadoopFsRelation(
            index, index.partitionSchema(), schema, Option.empty(), fileFormat, opts, spark);
    return spark.baseRelationToDataFrame(relation);
  }

  /**
   * {@link #read} with the paths and the options each in one string (one Py4J call: a Python
   * list or dict crosses element by element): paths separated by {@code \u001f}, options as
   * {@code key \u001e value} pairs separated by {@code \u001f}.
   */
  public static Dataset<Row> readJoined(
      SparkSession spark, String format, String paths, String options, String schemaDdl)
      throws IOException {
    List<String> list = java.util.Arrays.asList(paths.split("\u001f", -1));
    return read(spark, format, list, joined(options), schemaDdl);
  }

  /**
   * The schema Spark reads each of the files {@code paths} with, as Spark's JSON, one line per
   * path in order: each file's own (its footer or header: Avro, ORC), as {@code format}'s
   * {@code inferSchema} gives it for that file alone; an empty line where it has none. The
   * files are listed as {@link #read} lists them and their schemas read on the driver, 8 at
   * a time (one Py4J call).
   */
  public static String schemas(SparkSession spark, String format, String paths, String options)
      throws Exception {
    FileFormat fileFormat = fileFormat(format);
    scala.collection.immutable.Map<String, String> opts = caseInsensitive(joined(options));
    List<Path> roots = roots(java.util.Arrays.asList(paths.split("\u001f", -1)));
    InMemoryFileIndex index = index(spark, roots, opts);
    Configuration conf = spark.sessionState().newHadoopConfWithOptions(opts);
    Map<Path, FileStatus> byPath = new HashMap<>();
    for (FileStatus file : CollectionConverters.asJava(index.allFiles())) {
      byPath.put(file.getPath(), file);
    }
    List<java.util.concurrent.Callable<String>> reads = new ArrayList<>();
    for (Path root : roots) {
      FileStatus file = byPath.get(root.getFileSystem(conf).makeQualified(root));
      reads.add(
          () -> {
            try {
              Option<StructType> found =
                  fileFormat.inferSchema(
                      spark, opts, CollectionConverters.asScala(List.of(file)).toSeq());
              return found.isEmpty() ? "" : found.get().json();
            } catch (Exception e) {
              throw new IOException(
                  "sluice: cannot read the " + format + " schema of " + root
                      + " (truncated or corrupt?): " + e,
                  e);
            }
          });
    }
    java.util.concurrent.ExecutorService pool =
        java.util.concurrent.Executors.newFixedThreadPool(Math.max(1, Math.min(8, roots.size())));
    try {
      StringBuilder out = new StringBuilder();
      for (java.util.concurrent.Future<String> done : pool.invokeAll(reads)) {
        try {
          out.append(done.get()).append('\n');
        } catch (java.util.concurrent.ExecutionException e) {
          throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
        }
      }
      return out.toString();
    } finally {
      pool.shutdownNow();
    }
  }

  private static scala.collection.immutable.Map<String, String> caseInsensitive(
      Map<String, String> options) {
    return CaseInsensitiveMap$.MODULE$.apply(
        scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(options)));
  }

  private static List<Path> roots(List<String> paths) {
    List<Path> roots = new ArrayList<>(paths.size());
    for (String path : paths) {
      roots.add(new Path(path));
    }
    return roots;
  }

  /** The file index over {@code roots}, each checked to be listed once, as itself. */
  private static InMemoryFileIndex index(
      SparkSession spark, List<Path> roots, scala.collection.immutable.Map<String, String> opts)
      throws IOException {
    InMemoryFileIndex index =
        new InMemoryFileIndex(
            spark,
            CollectionConverters.asScala(roots).toSeq(),
            opts,
            Option.empty(),
            NoopCache$.MODULE$,
            Option.empty(),
            Option.empty());
    List<FileStatus> files = CollectionConverters.asJava(index.allFiles());
    checkEachOnce(spark.sessionState().newHadoopConfWithOptions(opts), roots, files);
    return index;
  }

  private static Map<String, String> joined(String options) {
    Map<String, String> settings = new HashMap<>();
    if (!options.isEmpty()) {
      for (String pair : options.split("\u001f", -1)) {
        String[] kv = pair.split("\u001e", 2);
        settings.put(kv[0], kv[1]);
      }
    }
    return settings;
  }

  private static FileFormat fileFormat(String format) {
    switch (format) {
      case "text":
        return new TextFileFormat();
      case "lines":
        return new CompressedLines();
      case "parquet":
        return new ParquetFileFormat();
      case "orc":
        return new OrcFileFormat();
      case "avro":
        return new AvroFileFormat();
      default:
        throw new IllegalArgumentException("sluice: no exact reader for format " + format);
    }
  }

  private static StructType schema(
      SparkSession spark,
      FileFormat fileFormat,
      String format,
      String schemaDdl,
      scala.collection.immutable.Map<String, String> opts,
      InMemoryFileIndex index) {
    if (schemaDdl != null && schemaDdl.startsWith("{")) {
      return (StructType) DataType.fromJson(schemaDdl);
    }
    if (schemaDdl != null) {
      return StructType.fromDDL(schemaDdl);
    }
    if (format.equals("text") || format.equals("lines")) {
      return new StructType().add("value", DataTypes.StringType);
    }
    Option<StructType> inferred = fileFormat.inferSchema(spark, opts, index.allFiles());
    if (inferred.isEmpty()) {
      throw new IllegalArgumentException("sluice: cannot infer a schema from " + index);
    }
    return inferred.get().asNullable();
  }

  /** Every path listed once, as itself: not missing, not a folder, never twice. */
  private static void checkEachOnce(Configuration conf, List<Path> roots, List<FileStatus> files)
      throws IOException {
    Map<Path, Integer> listed = new HashMap<>();
    for (FileStatus file : files) {
      listed.merge(file.getPath(), 1, Integer::sum);
    }
    for (Path root : roots) {
      Path qualified = root.getFileSystem(conf).makeQualified(root);
      Integer times = listed.remove(qualified);
      if (times == null || times != 1) {
        throw new FileNotFoundException(
            "sluice: input file " + root + " was listed " + (times == null ? 0 : times)
                + " times instead of once (missing, a folder, or named twice)");
      }
    }
    if (!listed.isEmpty()) {
      throw new FileNotFoundException("sluice: listing found files not asked for: " + listed.keySet());
    }
  }
}
