package io.sluice.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * The line number of each row of a text file as Spark's line reader gives them (every line,
 * blank ones too, in file order), plus two checks of the raw bytes, in one pass:
 *
 * <ul>
 *   <li>{@link #INVALID_UTF8}: the line is not valid UTF-8 (RFC 3629: no overlong forms, no
 *       surrogates, nothing above U+10FFFF);
 *   <li>{@link #TRAILING}: with {@code json}, the line holds something after its first JSON
 *       value other than whitespace ({@code {...} {...}}, {@code {...} xyz});
 *   <li>{@link #BLANK}: the line holds nothing but ASCII whitespace (space, tab, CR, LF, VT,
 *       FF), or nothing: not a record (no other flag is set then).
 * </ul>
 *
 * Returns {@code line | flags << 48} (line from 1). A task may read several splits, each from
 * its start; a split that does not start a file needs {@code linesBefore} for its block start
 * (counted beforehand), else this throws: line numbers are never guessed.
 */
public final class LineInfo implements UDF3<String, Long, byte[], Long> {
  private static final long serialVersionUID = 1L;
  public static final long INVALID_UTF8 = 1L;
  public static final long TRAILING = 2L;
  public static final long BLANK = 4L;
  public static final int FLAG_SHIFT = 48;

  private final boolean json;
  private final HashMap<String, HashMap<Long, Long>> linesBefore;
  private transient String lastPath;
  private transient long lastStart;
  private transient long next;

  /**
   * {@code linesBefore}: per file path (as {@code _metadata.file_path} gives it), per split
   * start, the lines before it. Keys and values may come as any {@link Number} (Py4J passes
   * small Python ints as {@code Integer}); they are stored as longs.
   */
  public LineInfo(boolean json, Map<String, ? extends Map<?, ?>> linesBefore) {
    this.json = json;
    this.linesBefore = new HashMap<>();
    for (Map.Entry<String, ? extends Map<?, ?>> e : linesBefore.entrySet()) {
      HashMap<Long, Long> starts = new HashMap<>();
      for (Map.Entry<?, ?> s : e.getValue().entrySet()) {
        starts.put(((Number) s.getKey()).longValue(), ((Number) s.getValue()).longValue());
      }
      this.linesBefore.put(e.getKey(), starts);
    }
  }

  /**
   * This UDF, non-deterministic (Spark evaluates it once per row, where the plan puts it). Built
   * here because Py4J may pick {@code functions.udf(Object, DataType)}, the untyped Scala
   * overload Spark refuses, over {@code udf(UDF3, DataType)} when Python calls it.
   */
  public static UserDefinedFunction function(
      boolean json, Map<String, ? extends Map<?, ?>> linesBefore) {
    return functions.udf(new LineInfo(json, linesBefore), DataTypes.LongType).asNondeterministic();
  }

  @Override
  public Long call(String path, Long blockStart, byte[] value) {
    long start = blockStart == null ? 0L : blockStart;
    if (lastPath == null || start != lastStart || !path.equals(lastPath)) {
      next = 1 + before(path, start);
      lastPath = path;
      lastStart = start;
    }
    long line = next++;
    long flags = 0;
    if (value != null) {
      if (blank(value)) {
        flags |= BLANK;
      } else if (!validUtf8(value)) {
        flags |= INVALID_UTF8;
      } else if (json && trailing(value)) {
        flags |= TRAILING;
      }
    }
    return line | (flags << FLAG_SHIFT);
  }

  private long before(String path, long start) {
    if (start == 0) {
      return 0;
    }
    HashMap<Long, Long> starts = linesBefore.get(path);
    Long found = starts == null ? null : starts.get(start);
    if (found == null) {
      throw new IllegalStateException(
          "sluice: " + path + " was split at byte " + start + " but its earlier lines were not"
              + " counted");
    }
    return found;
  }

  /** Nothing but ASCII whitespace (what {@code btrim(s, ' \t\u000b\f\r')} empties). */
  static boolean blank(byte[] b) {
    for (byte c : b) {
      if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != 0x0b && c != '\f') {
        return false;
      }
    }
    return true;
  }

  /** RFC 3629 well-formed UTF-8. */
  static boolean validUtf8(byte[] b) {
    int i = 0;
    int n = b.length;
    while (i < n) {
      int c = b[i] & 0xff;
      if (c < 0x80) {
        i++;
        continue;
      }
      int need;
      int min;
      if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
        min = 0x80;
      } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        min = 0x800;
      } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        min = 0x10000;
      } else {
        return false;
      }
      if (i + need >= n) {
        return false;
      }
      int cp = c & (0x3f >> need);
      for (int k = 1; k <= need; k++) {
        int d = b[i + k] & 0xff;
        if ((d & 0xc0) != 0x80) {
          return false;
        }
        cp = (cp << 6) | (d & 0x3f);
      }
      if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        return false;
      }
      i += need + 1;
    }
    return true;
  }

  private static boolean space(int c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
  }

  /**
   * Whether anything but whitespace follows the line's first JSON value. A value that never
   * ends (malformed) is left to the JSON parser: false.
   */
  static boolean trailing(byte[] b) {
    int n = b.length;
    int i = 0;
    while (i < n && space(b[i])) {
      i++;
    }
    if (i == n) {
      return false;
    }
    int end = valueEnd(b, i);
    if (end < 0) {
      return false;
    }
    for (int k = end; k < n; k++) {
      if (!space(b[k])) {
        return true;
      }
    }
    return false;
  }

  /** The index just after the JSON value starting at {@code i}, or -1 if it does not end. */
  private static int valueEnd(byte[] b, int i) {
    int n = b.length;
    int c = b[i];
    if (c == '"') {
      return stringEnd(b, i);
    }
    if (c != '{' && c != '[') {
      int k = i;
      while (k < n && !space(b[k]) && b[k] != ',' && b[k] != '}' && b[k] != ']' && b[k] != '{'
          && b[k] != '[' && b[k] != '"') {
        k++;
      }
      return k;
    }
    int depth = 0;
    int k = i;
    while (k < n) {
      int d = b[k];
      if (d == '"') {
        k = stringEnd(b, k);
        if (k < 0) {
          return -1;
        }
        continue;
      }
      if (d == '{' || d == '[') {
        depth++;
      } else if (d == '}' || d == ']') {
        depth--;
        if (depth == 0) {
          return k + 1;
        }
      }
      k++;
    }
    return -1;
  }

  private static int stringEnd(byte[] b, int i) {
    int n = b.length;
    int k = i + 1;
    while (k < n) {
      int d = b[k];
      if (d == '\\') {
        k += 2;
        continue;
      }
      if (d == '"') {
        return k + 1;
      }
      k++;
    }
    return -1;
  }
}
