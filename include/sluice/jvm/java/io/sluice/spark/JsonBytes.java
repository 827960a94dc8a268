package io.sluice.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.io.Serializable;
import java.util.List;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.objects.Invoke;
import org.apache.spark.sql.catalyst.json.CreateJacksonParser$;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.catalyst.json.JacksonParser;
import org.apache.spark.sql.catalyst.json.JacksonParser$;
import org.apache.spark.sql.catalyst.util.FailureSafeParser;
import org.apache.spark.sql.catalyst.util.PermissiveMode$;
import org.apache.spark.sql.classic.ExpressionUtils$;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataType$;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.ObjectType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.Iterator;
import scala.collection.immutable.Map;
import scala.collection.immutable.Map$;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code from_json(text, schema, {mode: PERMISSIVE, columnNameOfCorruptRecord: corrupt})} to a
 * struct, exactly as Spark's own (its {@code JacksonParser} and {@code FailureSafeParser}, the
 * same options), with one difference: Jackson reads the text's UTF-8 bytes as they are, as
 * Spark's JSON file reader does, instead of through a {@code java.io.Reader} that decodes them
 * first, as Spark's {@code from_json} does (that decoding costs about as much as the parse).
 *
 * <p>The results are the same for valid UTF-8 text, except where Jackson would look at the
 * first bytes to guess another encoding (a byte-order mark, a NUL among the first four bytes):
 * such a text goes through the decoding reader, as in {@code from_json}. Text that is not
 * valid UTF-8 may give a different result (the reader replaces bad bytes with U+FFFD, the byte
 * parser fails the record): callers must not take such rows from here ({@link LineInfo} flags
 * them).
 *
 * <p>Like Spark's {@code from_json}, it is an {@code Invoke} of {@link #evaluate} on this object
 * (a literal in the plan: each task deserializes its own copy, with its own parser).
  */
public final class JsonBytes implements Serializable {
  private static final long serialVersionUID = 1L;

  private final StructType schema;
  private final String corrupt;
  private final String timeZone;
  private transient FailureSafeParser<UTF8String> parser;

  public JsonBytes(StructType schema, String corrupt, String timeZone) {
    this.schema = schema;
    this.corrupt = corrupt;
    this.timeZone = timeZone;
  }

  /**
   * The parse of {@code text} (a string column) to {@code schema} (a struct as JSON, with the
   * string field {@code corrupt} that receives a text that does not parse), as a column.
   */
  public static Column column(Column text, String schema, String corrupt, String timeZone) {
    StructType struct = (StructType) DataType$.MODULE$.fromJson(schema);
    Expression input = ExpressionUtils$.MODULE$.expression(text);
    JsonBytes evaluator = new JsonBytes(struct, corrupt, timeZone);
    Expression target = Literal$.MODULE$.create(evaluator, new ObjectType(JsonBytes.class));
    List<Expression> arguments = List.of(input);
    List<AbstractDataType> types = List.of(DataTypes.StringType);
    Invoke invoke =
        new Invoke(
            target,
            "evaluate",
            struct,
            CollectionConverters.asScala(arguments).toSeq(),
            CollectionConverters.asScala(types).toSeq(),
            true,
            true,
            true);
    return ExpressionUtils$.MODULE$.column(invoke);
  }

  /** The struct for one text (null for null). */
  public InternalRow evaluate(UTF8String text) {
    if (text == null) {
      return null;
    }
    Iterator<InternalRow> rows = parser().parse(text);
    return rows.hasNext() ? rows.next() : null;
  }

  @SuppressWarnings("unchecked")
  private FailureSafeParser<UTF8String> parser() {
    if (parser == null) {
      Map<String, String> options = Map$.MODULE$.empty();
      options = (Map<String, String>) options.updated("mode", "PERMISSIVE");
      options = (Map<String, String>) options.updated("columnNameOfCorruptRecord", corrupt);
      JSONOptions parsed = new JSONOptions(options, timeZone, corrupt);
      java.util.List<StructField> data = new java.util.ArrayList<>();
      for (StructField f : schema.fields()) {
        if (!f.name().equals(corrupt)) {
          data.add(f);
        }
      }
      StructType dataSchema = new StructType(data.toArray(new StructField[0]));
      JacksonParser raw =
          new JacksonParser(
              dataSchema, parsed, false, JacksonParser$.MODULE$.$lessinit$greater$default$4());
      scala.Function2<JsonFactory, UTF8String, JsonParser> create = JsonBytes::create;
      scala.Function1<UTF8String, UTF8String> literal = s -> s;
      parser =
          new FailureSafeParser<>(
              s -> raw.parse(s, create, literal), PermissiveMode$.MODULE$, schema, corrupt);
    }
    return parser;
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
      return factory.createParser(bytes, start, length);
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
