package io.sluice.spark;

import java.io.IOException;
import java.io.InputStream;

/**
 * An input stream that decodes its source a block at a time: {@link #nextBlock()} fills {@link
 * #buffer} and sets {@code [pos, limit)} to the bytes it decoded; reads copy from there. The LZ4
 * frame reader ({@link Lz4Frames}) and Hadoop's lz4 block framing ({@link
 * CompressedLines.HadoopLz4}) share it.
 */
abstract class BlockStream extends InputStream {
  protected byte[] buffer = new byte[0];
  protected int pos;
  protected int limit;

  /** Decodes the next block into {@code buffer[pos, limit)}; false at the end of the input. */
  protected abstract boolean nextBlock() throws IOException;

  @Override
  public int read() throws IOException {
    byte[] one = new byte[1];
    int n = read(one, 0, 1);
    return n < 0 ? -1 : one[0] & 0xff;
  }

  @Override
  public int read(byte[] b, int off, int len) throws IOException {
    if (len == 0) {
      return 0;
    }
    while (pos == limit) {
      if (!nextBlock()) {
        return -1;
      }
    }
    int n = Math.min(len, limit - pos);
    System.arraycopy(buffer, pos, b, off, n);
    pos += n;
    return n;
  }
}
