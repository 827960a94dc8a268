package io.sluice.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.util.JsonParserDelegate;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.List;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.json.JsonToStructsEvaluator;
import org.apache.spark.sql.catalyst.expressions.objects.Invoke;
import org.apache.spark.sql.catalyst.json.CreateJacksonParser$;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.catalyst.json.JacksonParser;
import org.apache.spark.sql.catalyst.json.JacksonParser$;
import org.apache.spark.sql.classic.ExpressionUtils$;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataType$;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.ObjectType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.Iterator;
import scala.collection.immutable.Map;
import scala.Option;
import scala.collection.immutable.Map$;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A JSON text parsed to a struct by Spark's own {@code JacksonParser} with the options of
 * Sluice's {@code from_json} (so each field is converted exactly as {@code from_json} converts
 * it), reading the text's UTF-8 bytes as they are, as Spark's JSON file reader does, instead of
 * through a {@code java.io.Reader} that decodes them first, as {@code from_json} does (that
 * decoding costs about as much as the parse).
 *
 * <p>{@link #evaluate} answers only for a text that is exactly one JSON object whose every field
 * converts: anything else (a corrupt record, another value, a field that does not convert, text
 * after the object) gives null, and the caller parses that text again its slower way. So there
 * is no partial result, no corrupt-record column, no need to tell the cases apart here.
 *
 * <p>For valid UTF-8 the byte parser reads what the decoding reader reads, except where Jackson
 * would look at the first bytes to guess another encoding (a byte-order mark, a NUL among the
 * first four bytes): such a text goes through the decoding reader, as in {@code from_json}.
 * Text that is not valid UTF-8 may give a different result (the reader replaces bad bytes with
 * U+FFFD, the byte parser fails): callers must not take such rows from here ({@link LineInfo}
 * flags them).
 *
 * <p>Like Spark's {@code from_json}, it is an {@code Invoke} of a method of this object (a
 * literal in the plan: each task deserializes its own copy, with its own parser).
 */
public final class JsonBytes implements Serializable {
  private static final long serialVersionUID = 1L;

  private final StructType schema;
  private final String timeZone;
  private transient JacksonParser parser;
  private transient JsonFactory factory;

  public JsonBytes(StructType schema, String timeZone) {
    this.schema = schema;
    this.timeZone = timeZone;
  }

  /** {@link #evaluate} of {@code text} (a string column) as a column; {@code schema}: JSON. */
  public static Column column(Column text, String schema, String timeZone) {
    StructType struct = (StructType) DataType$.MODULE$.fromJson(schema);
    return invoke(new JsonBytes(struct, timeZone), "evaluate", struct, text);
  }

  /** {@link #trailing} of {@code text} (a string column) as a column. */
  public static Column trailingColumn(Column text, String timeZone) {
    return invoke(new JsonBytes(new StructType(), timeZone), "trailing", DataTypes.BooleanType, text);
  }

  /**
   * Whether {@code bytes} (a binary column) are well-formed UTF-8 by {@link LineInfo}'s rule, the
   * one the files source applies to each line (null for null): for text that does not come
   * through {@link LineInfo}, such as Kafka values.
   */
  public static Column validUtf8Column(Column bytes) {
    JsonBytes target = new JsonBytes(new StructType(), "UTC");
    return invoke(
        target, JsonBytes.class, "validUtf8", DataTypes.BooleanType, bytes, DataTypes.BinaryType);
  }

  /**
   * Exactly Spark's {@code from_json(text, schema, {mode: PERMISSIVE, columnNameOfCorruptRecord:
   * corrupt})}: the evaluator Spark's {@code JsonToStructs} runs, as an {@code Invoke}, which
   * Spark compiles with the rest of the stage ({@code JsonToStructs} itself is interpreted and
   * keeps its whole projection out of whole-stage code generation).
   */
  public static Column fromJson(Column text, String schema, String corrupt, String timeZone) {
    StructType struct = (StructType) DataType$.MODULE$.fromJson(schema);
    Map<String, String> options = Map$.MODULE$.empty();
    @SuppressWarnings("unchecked")
    Map<String, String> permissive = (Map<String, String>) options.updated("mode", "PERMISSIVE");
    @SuppressWarnings("unchecked")
    Map<String, String> named =
        (Map<String, String>) permissive.updated("columnNameOfCorruptRecord", corrupt);
    JsonToStructsEvaluator evaluator =
        new JsonToStructsEvaluator(named, struct, corrupt, Option.apply(timeZone), false);
    return invoke(
        evaluator, JsonToStructsEvaluator.class, "evaluate", struct, text, DataTypes.StringType);
  }

  private static Column invoke(JsonBytes target, String method, DataType type, Column text) {
    return invoke(target, JsonBytes.class, method, type, text, DataTypes.StringType);
  }

  private static Column invoke(
      Object target, Class<?> cls, String method, DataType type, Column arg, DataType argType) {
    Expression input = ExpressionUtils$.MODULE$.expression(arg);
    Expression object = Literal$.MODULE$.create(target, new ObjectType(cls));
    List<Expression> arguments = List.of(input);
    List<AbstractDataType> types = List.of(argType);
    Invoke invoke =
        new Invoke(
            object,
            method,
            type,
            CollectionConverters.asScala(arguments).toSeq(),
            CollectionConverters.asScala(types).toSeq(),
            true,
            true,
            true);
    return ExpressionUtils$.MODULE$.column(invoke);
  }

  /** The struct, or null unless the text is one JSON object whose fields all convert. */
  public InternalRow evaluate(UTF8String text) {
    if (parser == null) {
      parser =
          new JacksonParser(
              schema, options(), false, JacksonParser$.MODULE$.$lessinit$greater$default$4());
    }
    Ending ending = new Ending();
    scala.Function2<JsonFactory, UTF8String, JsonParser> create =
        (f, t) -> ending.watch(create(f, t));
    scala.Function1<UTF8String, UTF8String> literal = t -> t;
    Iterator<InternalRow> rows;
    try {
      rows = parser.parse(text, create, literal).iterator();
    } catch (Exception e) { // BadRecordException (not a RuntimeException) and kin: not clean
      return null;
    }
    if (!rows.hasNext() || ending.trailing) {
      return null;
    }
    InternalRow row = rows.next();
    return rows.hasNext() ? null : row;
  }

  /** {@link LineInfo#validUtf8} (an {@code Invoke} target: see {@link #validUtf8Column}). */
  public boolean validUtf8(byte[] value) {
    return LineInfo.validUtf8(value);
  }

  /**
   * Whether the text starts with a complete JSON value followed by something other than JSON
   * whitespace ({@code {...} {...}}, {@code {...} xyz}). False when the first value does not
   * parse (that text is malformed anyway).
   */
  public boolean trailing(UTF8String text) {
    if (factory == null) {
      factory = options().buildJsonFactory();
    }
    JsonParser p = create(factory, text);
    try (p) {
      try {
        if (p.nextToken() == null) {
          return false;
        }
        p.skipChildren();
      } catch (IOException | RuntimeException e) {
        return false;
      }
      try {
        return p.nextToken() != null;
      } catch (IOException | RuntimeException e) {
        return true;
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private JSONOptions options() {
    Map<String, String> options = Map$.MODULE$.empty();
    @SuppressWarnings("unchecked")
    Map<String, String> permissive = (Map<String, String>) options.updated("mode", "PERMISSIVE");
    return new JSONOptions(permissive, timeZone, "_corrupt_record");
  }

  /**
   * Watches the parser Spark's {@code JacksonParser} reads one record with: when Spark closes
   * it, right after the record's first value, whether anything but whitespace follows.
   */
  private static final class Ending {
    boolean trailing;

    JsonParser watch(JsonParser p) {
      return new JsonParserDelegate(p) {
        private boolean checked;

        @Override
        public void close() throws IOException {
          if (!checked) {
            checked = true;
            try {
              trailing = delegate.currentToken() != null && delegate.nextToken() != null;
            } catch (IOException | RuntimeException e) {
              trailing = true;
            }
          }
          super.close();
        }
      };
    }
  }
  /** A byte parser over the text's UTF-8, unless Jackson would guess another encoding. */
  static JsonParser create(JsonFactory factory, UTF8String text) {
    ByteBuffer buffer = text.getByteBuffer();
    byte[] bytes = buffer.array();
    int start = buffer.arrayOffset() + buffer.position();
    int length = buffer.remaining();
    if (guessesEncoding(bytes, start, length)) {
      return CreateJacksonParser$.MODULE$.utf8String(factory, text);
    }
    try {
      // A stream, not the array: Spark takes a number in a string field from a parser over a
      // byte array as the input's exact text (and assumes the array starts at the text); from
      // any other source it writes the number again, as from_json does.
      return factory.createParser(new ByteArrayInputStream(bytes, start, length));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /**
   * Whether Jackson's encoding detection could see something other than plain UTF-8 in the
   * first four bytes: a NUL, or a byte that starts a byte-order mark.
   */
  static boolean guessesEncoding(byte[] b, int start, int length) {
    int n = Math.min(4, length);
    for (int i = 0; i < n; i++) {
      int c = b[start + i] & 0xff;
      if (c == 0 || c == 0xef || c == 0xfe || c == 0xff) {
        return true;
      }
    }
    return false;
  }
}
