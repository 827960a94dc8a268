package io.sluice.spark;

import java.io.BufferedInputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.Locale;
import java.util.zip.GZIPInputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.io.compress.BZip2Codec;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.util.LineReader;
import org.apache.hadoop.util.ReflectionUtils;
import org.apache.spark.TaskContext;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.io.HadoopCodecStreams$;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.text.TextFileFormat;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import org.apache.spark.util.SerializableConfiguration$;
import org.apache.spark.util.TaskCompletionListener;
import scala.Function1;
import scala.Option;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.collection.immutable.Map;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;

/**
 * Spark's text format (one row per line, column {@code value}) whose files are decompressed by
 * a codec Sluice chooses, not by their extension alone: the files source's {@code
 * compression} ({@code auto}: by extension; {@code none | gzip | bzip2 | zstd | lz4}: every
 * file so), given as the reader option {@value #OPTION}.
 *
 * <p>Spark's own line reader reads the files it would read the same way: plain files (split
 * across tasks like any text file) and {@code .bz2} files read as bzip2 (Hadoop's splittable
 * {@link BZip2Codec}). Every other compressed file is read whole by one task, here: gzip
 * ({@link GZIPInputStream}, concatenated members too), bzip2 under another name (Hadoop's
 * codec), zstd (zstd-jni, which Spark ships; Hadoop's own codec needs native code), lz4 (the
 * frame format of the {@code lz4} tool and python-lz4, linked blocks too: {@link Lz4Frames};
 * or Hadoop's block framing, what Spark writes, read with lz4-java and bounds checks: Hadoop's
 * codec runs out of heap on a frame),
 * and plain files whose names say otherwise ({@code compression: none}). Lines end at
 * {@code \n} (Spark's {@code lineSep}), a UTF-8 byte-order mark before the first line is
 * dropped: as Spark's reader does.
 *
 * <p>A file that does not decompress (truncated, corrupt, not that codec) fails the task with
 * one message naming it and its codec, never a shorter file: no record is dropped silently.
 */
public final class CompressedLines extends TextFileFormat {
  private static final long serialVersionUID = 1L;

  /** The reader option naming the source's {@code compression}. */
  public static final String OPTION = "sluice.compression";

  private static final byte[] NEWLINE = {'\n'};
  // A Hadoop lz4 block longer than this is taken for corruption (Hadoop's default is 256 KiB)
  private static final int MAX_HADOOP_LZ4_BLOCK = 1 << 30;

  /**
   * The codec a file named {@code name} is read with: {@code none}, {@code gzip}, {@code
   * bzip2}, {@code zstd} or {@code lz4}. {@code auto} (or null) goes by the extension, case
   * aside: {@code .gz .gzip}, {@code .bz2}, {@code .zst .zstd}, {@code .lz4} (the names Spark's
   * codecs take), anything else none. Mirrored by {@code sluice.sources.compression.codec_of}.
   */
  public static String codecOf(String compression, String name) {
    if (compression != null && !compression.equals("auto")) {
      return compression;
    }
    String lower = name.toLowerCase(Locale.ROOT);
    if (lower.endsWith(".gz") || lower.endsWith(".gzip")) {
      return "gzip";
    }
    if (lower.endsWith(".bz2")) {
      return "bzip2";
    }
    if (lower.endsWith(".zst") || lower.endsWith(".zstd")) {
      return "zstd";
    }
    if (lower.endsWith(".lz4")) {
      return "lz4";
    }
    return "none";
  }

  /** Whether Spark's own line reader reads the file as {@code codec} (then it may split it). */
  static boolean bySpark(String codec, Configuration conf, Path path) {
    Option<CompressionCodec> spark = HadoopCodecStreams$.MODULE$.getDecompressionCodec(conf, path);
    if (codec.equals("none")) {
      return spark.isEmpty();
    }
    return codec.equals("bzip2") && spark.isDefined() && spark.get() instanceof BZip2Codec;
  }

  private static String option(Map<String, String> options) {
    Option<String> value = options.get(OPTION);
    return value.isDefined() ? value.get() : "auto";
  }

  @Override
  public boolean isSplitable(SparkSession spark, Map<String, String> options, Path path) {
    String codec = codecOf(option(options), path.getName());
    if (codec.equals("none") || codec.equals("bzip2")) {
      Configuration conf = spark.sessionState().newHadoopConfWithOptions(options);
      return bySpark(codec, conf, path);
    }
    return false;
  }

  @Override
  public Function1<PartitionedFile, Iterator<InternalRow>> buildReader(
      SparkSession spark,
      StructType dataSchema,
      StructType partitionSchema,
      StructType requiredSchema,
      Seq<Filter> filters,
      Map<String, String> options,
      Configuration hadoopConf) {
    Function1<PartitionedFile, Iterator<InternalRow>> sparks =
        super.buildReader(
            spark, dataSchema, partitionSchema, requiredSchema, filters, options, hadoopConf);
    Broadcast<SerializableConfiguration> conf =
        SerializableConfiguration$.MODULE$.broadcast(spark.sparkContext(), hadoopConf);
    return new Reader(sparks, conf, option(options), requiredSchema.isEmpty());
  }

  @Override
  public String shortName() {
    return "sluice-lines";
  }

  @Override
  public String toString() {
    return "CompressedLines";
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof CompressedLines;
  }

  @Override
  public int hashCode() {
    return CompressedLines.class.hashCode();
  }

  /** Reads one file (or one split of a file Spark's reader reads). */
  static final class Reader extends AbstractFunction1<PartitionedFile, Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;
    private final Function1<PartitionedFile, Iterator<InternalRow>> sparks;
    private final Broadcast<SerializableConfiguration> conf;
    private final String compression;
    private final boolean empty;

    Reader(
        Function1<PartitionedFile, Iterator<InternalRow>> sparks,
        Broadcast<SerializableConfiguration> conf,
        String compression,
        boolean empty) {
      this.sparks = sparks;
      this.conf = conf;
      this.compression = compression;
      this.empty = empty;
    }

    @Override
    public Iterator<InternalRow> apply(PartitionedFile file) {
      Path path = file.filePath().toPath();
      Configuration hadoop = conf.value().value();
      String codec = codecOf(compression, path.getName());
      if (bySpark(codec, hadoop, path)) {
        // Spark's reader opens the file (and decompresses its first bytes) right away
        return codec.equals("none") ? sparks.apply(file) : new Named(() -> sparks.apply(file),
            path, codec);
      }
      Lines lines = new Lines(path, codec, hadoop, empty);
      return codec.equals("none") ? lines : new Named(() -> lines, path, codec);
    }
  }

  /** The lines of one whole file, decompressed by {@code codec}. */
  static final class Lines extends AbstractIterator<InternalRow> {
    private final Path path;
    private final String codec;
    private final Configuration conf;
    private final UnsafeRow emptyRow;
    private final UnsafeRowWriter writer;
    private final Text line = new Text();
    private InputStream in;
    private LineReader reader;
    private boolean first = true;
    private boolean ahead;
    private boolean done;

    Lines(Path path, String codec, Configuration conf, boolean empty) {
      this.path = path;
      this.codec = codec;
      this.conf = conf;
      this.emptyRow = empty ? new UnsafeRow(0) : null;
      this.writer = empty ? null : new UnsafeRowWriter(1);
    }

    @Override
    public boolean hasNext() {
      if (ahead) {
        return true;
      }
      if (done) {
        return false;
      }
      try {
        if (reader == null) {
          open();
        }
        if (reader.readLine(line) == 0) {
          done = true;
          close();
          return false;
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      if (first) {
        first = false;
        byte[] b = line.getBytes();
        if (line.getLength() >= 3 && (b[0] & 0xff) == 0xef && (b[1] & 0xff) == 0xbb
            && (b[2] & 0xff) == 0xbf) {
          byte[] rest = java.util.Arrays.copyOfRange(b, 3, line.getLength());
          line.set(rest);
        }
      }
      ahead = true;
      return true;
    }

    @Override
    public InternalRow next() {
      if (!hasNext()) {
        throw new java.util.NoSuchElementException("end of " + path);
      }
      ahead = false;
      if (emptyRow != null) {
        return emptyRow;
      }
      writer.reset();
      writer.write(0, line.getBytes(), 0, line.getLength());
      return writer.getRow();
    }

    private void open() throws IOException {
      FileSystem fs = path.getFileSystem(conf);
      InputStream raw = fs.open(path);
      in = raw; // closed on failure below, and when the task ends
      TaskContext task = TaskContext.get();
      if (task != null) {
        task.addTaskCompletionListener(
            (TaskCompletionListener) context -> close());
      }
      in = decoded(codec, new BufferedInputStream(raw, 64 * 1024), conf);
      reader = new LineReader(in, conf, NEWLINE);
    }

    private void close() {
      InputStream held = in;
      in = null;
      if (held != null) {
        try {
          held.close();
        } catch (IOException ignored) {
          // the lines were read; nothing to lose
        }
      }
    }
  }

  /**
   * {@code data} decompressed whole as {@code codec}, by the streams the reader uses (one Py4J
   * call: the tests compare it with Python's codecs). Throws what the reader would.
   */
  public static byte[] decompress(String codec, byte[] data) throws IOException {
    try (InputStream in =
        decoded(codec, new BufferedInputStream(new java.io.ByteArrayInputStream(data)),
            new Configuration(false))) {
      return in.readAllBytes();
    }
  }

  /** {@code raw} decompressed as {@code codec}. */
  static InputStream decoded(String codec, InputStream raw, Configuration conf)
      throws IOException {
    switch (codec) {
      case "none":
        return raw;
      case "gzip":
        return new GZIPInputStream(raw, 64 * 1024);
      case "bzip2":
        {
          CompressionCodec bzip2 = ReflectionUtils.newInstance(BZip2Codec.class, conf);
          return bzip2.createInputStream(raw);
        }
      case "zstd":
        return new BufferedInputStream(
            new com.github.luben.zstd.ZstdInputStreamNoFinalizer(raw), 64 * 1024);
      case "lz4":
        return lz4(raw);
      default:
        throw new IllegalArgumentException("sluice: unknown compression " + codec);
    }
  }

  /**
   * An lz4 stream: the frame format (magic {@code 04 22 4D 18}: the {@code lz4} tool,
   * python-lz4's {@code lz4.frame}; linked or independent blocks, checksums checked,
   * concatenated and skippable frames too), else Hadoop's block framing (Spark's {@code
   * compression: lz4} output).
   */
  static InputStream lz4(InputStream raw) throws IOException {
    BufferedInputStream in =
        raw instanceof BufferedInputStream ? (BufferedInputStream) raw : new BufferedInputStream(raw);
    in.mark(4);
    byte[] magic = new byte[4];
    int got = in.readNBytes(magic, 0, 4);
    in.reset();
    int word = (magic[0] & 0xff) | (magic[1] & 0xff) << 8 | (magic[2] & 0xff) << 16
        | (magic[3] & 0xff) << 24;
    if (got == 4 && (word == Lz4Frames.MAGIC || (word & 0xFFFFFFF0) == 0x184D2A50)) {
      return new Lz4Frames(in); // a frame, or a skippable frame before one
    }
    return new HadoopLz4(in);
  }

  /**
   * Hadoop's lz4 block framing ({@code Lz4Codec}: {@code BlockCompressorStream}): blocks of a
   * 4-byte big-endian raw length, then chunks of a 4-byte compressed length and lz4 block data
   * until the raw length is produced. Lengths out of range are corruption, never an
   * allocation.
   */
  static final class HadoopLz4 extends BlockStream {
    private final InputStream in;
    private static final net.jpountz.lz4.LZ4Compressor BOUND =
        net.jpountz.lz4.LZ4Factory.fastestJavaInstance().fastCompressor();
    private final net.jpountz.lz4.LZ4SafeDecompressor lz4 =
        net.jpountz.lz4.LZ4Factory.fastestJavaInstance().safeDecompressor();

    HadoopLz4(InputStream in) {
      this.in = in;
    }

    @Override
    protected boolean nextBlock() throws IOException {
      byte[] header = new byte[4];
      int got = in.readNBytes(header, 0, 4);
      if (got == 0) {
        return false;
      }
      if (got < 4) {
        throw new IOException("lz4 (Hadoop framing): truncated block header");
      }
      int raw = java.nio.ByteBuffer.wrap(header).getInt();
      if (raw < 0 || raw > MAX_HADOOP_LZ4_BLOCK) {
        throw new IOException(
            "not an lz4 file: neither an lz4 frame nor Hadoop's lz4 block framing (a block of "
                + Integer.toUnsignedString(raw) + " bytes)");
      }
      if (buffer.length < raw) {
        buffer = new byte[raw];
      }
      int produced = 0;
      while (produced < raw) {
        if (in.readNBytes(header, 0, 4) < 4) {
          throw new IOException("lz4 (Hadoop framing): truncated chunk header");
        }
        int compressed = java.nio.ByteBuffer.wrap(header).getInt();
        int bound = BOUND.maxCompressedLength(raw) + 64;
        if (compressed <= 0 || compressed > bound) {
          throw new IOException(
              "lz4 (Hadoop framing): a chunk of " + Integer.toUnsignedString(compressed)
                  + " bytes in a block of " + raw);
        }
        byte[] data = in.readNBytes(compressed);
        if (data.length < compressed) {
          throw new IOException("lz4 (Hadoop framing): truncated chunk");
        }
        produced += lz4.decompress(data, 0, compressed, buffer, produced, raw - produced);
      }
      pos = 0;
      limit = raw;
      return true;
    }

    @Override
    public void close() throws IOException {
      in.close();
    }
  }

  /** Every failure to read a file, as one message naming the file and its codec. */
  static final class Named extends AbstractIterator<InternalRow> {
    private final java.util.function.Supplier<Iterator<InternalRow>> open;
    private final Path path;
    private final String codec;
    private Iterator<InternalRow> rows;

    Named(java.util.function.Supplier<Iterator<InternalRow>> open, Path path, String codec) {
      this.open = open;
      this.path = path;
      this.codec = codec;
    }

    @Override
    public boolean hasNext() {
      try {
        if (rows == null) {
          rows = open.get();
        }
        return rows.hasNext();
      } catch (Exception e) {
        throw failure(e);
      }
    }

    @Override
    public InternalRow next() {
      try {
        if (rows == null) {
          rows = open.get();
        }
        return rows.next();
      } catch (Exception e) {
        throw failure(e);
      }
    }

    private RuntimeException failure(Exception e) {
      Throwable cause = e instanceof UncheckedIOException ? e.getCause() : e;
      if (cause instanceof FileNotFoundException) {
        return e instanceof RuntimeException ? (RuntimeException) e : new UncheckedIOException(
            (IOException) cause);
      }
      IOException io =
          new IOException(
              "sluice: cannot read " + path + " as " + codec + " (truncated or corrupt?): " + cause
                  + ". The epoch fails rather than lose the file's records: replace the file"
                  + " with a complete one (or skip it: docs/rewind.md), then run again",
              cause);
      return new UncheckedIOException(io);
    }
  }
}
