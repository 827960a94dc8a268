package sluice.bench;

import java.time.Instant;
import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.functions.ScalarFunction;

/**
 * {@code MICROS_AS_MILLIS(ts)}: the instant whose epoch milliseconds are {@code ts}'s epoch
 * microseconds, a rowtime on which one millisecond of event time is one microsecond of the
 * bid's time (Flink's event time and watermarks are whole milliseconds).
 *
 * <p>Not {@code TO_TIMESTAMP_LTZ(micros, 3)}: that returns NULL past the year 9999, and today's
 * microseconds read as milliseconds are in the year 58000.
 */
public final class MicrosAsMillis extends ScalarFunction {
    private static final long serialVersionUID = 1L;

    public @DataTypeHint("TIMESTAMP_LTZ(3)") Instant eval(
            @DataTypeHint("TIMESTAMP_LTZ(6)") Instant ts) {
        if (ts == null) {
            return null;
        }
        long micros = Math.addExact(Math.multiplyExact(ts.getEpochSecond(), 1_000_000L), ts.getNano() / 1_000L);
        return Instant.ofEpochMilli(micros);
    }
}
