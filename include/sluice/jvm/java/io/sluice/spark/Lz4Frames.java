package io.sluice.spark;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import net.jpountz.lz4.LZ4Exception;
import net.jpountz.lz4.LZ4Factory;
import net.jpountz.lz4.LZ4SafeDecompressor;
import net.jpountz.xxhash.StreamingXXHash32;
import net.jpountz.xxhash.XXHash32;
import net.jpountz.xxhash.XXHashFactory;

/**
 * The LZ4 frame format (lz4.org's frame spec, v1.6): what the {@code lz4} tool and python-lz4's
 * {@code lz4.frame} write. Frames follow each other (concatenated files), skippable frames are
 * skipped, the header, block and content checksums are checked where the frame has them.
 *
 * <p>Blocks are independent (the {@code lz4} tool's default) or linked (python-lz4's default: a
 * block may copy from the 64 KiB before it). lz4-java's {@code LZ4FrameInputStream} refuses
 * linked blocks and its decompressors take no prefix, and commons-compress reads them about 50
 * times slower; so independent blocks go to lz4-java's decompressor and linked ones to the
 * small decoder here, whose every length and offset is checked against the buffers: damaged
 * input throws, it never reads or writes out of bounds.
 */
final class Lz4Frames extends BlockStream {
  static final int MAGIC = 0x184D2204;
  private static final int WINDOW = 64 * 1024;
  private static final LZ4SafeDecompressor LZ4 = LZ4Factory.fastestInstance().safeDecompressor();
  private static final XXHashFactory XXHASH = XXHashFactory.fastestInstance();

  private final InputStream in;
  private final XXHash32 hash = XXHASH.hash32();
  private byte[] compressed = new byte[0];
  // buffer (decoded bytes): [0, keep) the window a linked block may copy from, then the block
  private boolean inFrame;
  private boolean linked;
  private boolean blockChecksum;
  private boolean contentChecksum;
  private int blockMax;
  private StreamingXXHash32 content;
  private boolean done;

  Lz4Frames(InputStream in) {
    this.in = in;
  }

  /** Decodes the next block (reading frame headers and ends on the way); false at the end. */
  @Override
  protected boolean nextBlock() throws IOException {
    while (true) {
      if (done) {
        return false;
      }
      if (!inFrame) {
        if (!frameHeader()) {
          done = true;
          return false;
        }
        continue;
      }
      int size = int32();
      if (size == 0) { // the end mark
        if (contentChecksum && int32() != content.getValue()) {
          throw new IOException("lz4: content checksum mismatch");
        }
        inFrame = false;
        continue;
      }
      boolean raw = (size & 0x80000000) != 0;
      size &= 0x7fffffff;
      if (size > blockMax) {
        throw new IOException("lz4: a block of " + size + " bytes in a frame of " + blockMax);
      }
      if (compressed.length < size) {
        compressed = new byte[size];
      }
      readFully(compressed, size);
      if (blockChecksum && int32() != hash.hash(compressed, 0, size, 0)) {
        throw new IOException("lz4: block checksum mismatch");
      }
      int keep = linked ? Math.min(limit, WINDOW) : 0;
      if (keep > 0 && limit > keep) {
        System.arraycopy(buffer, limit - keep, buffer, 0, keep);
      }
      int decoded;
      if (raw) {
        System.arraycopy(compressed, 0, buffer, keep, size);
        decoded = size;
      } else if (!linked) {
        try {
          decoded = LZ4.decompress(compressed, 0, size, buffer, keep, blockMax);
        } catch (LZ4Exception e) {
          throw new IOException("lz4: a damaged block: " + e.getMessage(), e);
        }
      } else {
        decoded = decode(compressed, size, buffer, keep, keep + blockMax);
      }
      if (contentChecksum) {
        content.update(buffer, keep, decoded);
      }
      pos = keep;
      limit = keep + decoded;
      if (decoded > 0) {
        return true;
      }
    }
  }

  /** The next frame's header (skippable frames skipped); false at the end of the input. */
  private boolean frameHeader() throws IOException {
    while (true) {
      byte[] word = new byte[4];
      int got = in.readNBytes(word, 0, 4);
      if (got == 0) {
        return false;
      }
      if (got < 4) {
        throw new EOFException("lz4: truncated frame magic");
      }
      int magic = le(word, 0);
      if ((magic & 0xFFFFFFF0) == 0x184D2A50) { // a skippable frame
        in.skipNBytes(int32() & 0xffffffffL); // EOFException when cut short
        continue;
      }
      if (magic != MAGIC) {
        throw new IOException("lz4: not an lz4 frame (magic " + Integer.toHexString(magic) + ")");
      }
      break;
    }
    byte[] descriptor = new byte[14];
    readFully(descriptor, 2);
    int flg = descriptor[0] & 0xff;
    int bd = descriptor[1] & 0xff;
    if ((flg >>> 6) != 1 || (flg & 0x02) != 0 || (bd & 0x8f) != 0) {
      throw new IOException("lz4: unsupported frame version or reserved bits set");
    }
    if ((flg & 0x01) != 0) {
      throw new IOException("lz4: frames with a dictionary are not supported");
    }
    int length = 2;
    if ((flg & 0x08) != 0) { // content size
      readFully(descriptor, 2, 8);
      length += 8;
    }
    int check = in.read();
    if (check < 0) {
      throw new EOFException("lz4: truncated frame header");
    }
    if (((hash.hash(descriptor, 0, length, 0) >>> 8) & 0xff) != check) {
      throw new IOException("lz4: frame header checksum mismatch");
    }
    int code = (bd >>> 4) & 0x07;
    if (code < 4) {
      throw new IOException("lz4: unknown block size code " + code);
    }
    blockMax = 1 << (8 + 2 * code);
    linked = (flg & 0x20) == 0;
    blockChecksum = (flg & 0x10) != 0;
    contentChecksum = (flg & 0x04) != 0;
    content = contentChecksum ? XXHASH.newStreamingHash32(0) : null;
    int need = WINDOW + blockMax;
    if (buffer.length < need) {
      byte[] bigger = new byte[need];
      System.arraycopy(buffer, 0, bigger, 0, limit);
      buffer = bigger;
    }
    limit = 0; // a new frame copies from nothing before it
    pos = 0;
    inFrame = true;
    return true;
  }

  /**
   * One LZ4 block of {@code src[0, length)} decoded into {@code dst} from {@code start} (not
   * past {@code end}); a match may copy from anywhere in {@code dst} before it (the window of
   * a linked block). Returns the bytes decoded.
   */
  static int decode(byte[] src, int length, byte[] dst, int start, int end) throws IOException {
    int s = 0;
    int d = start;
    while (true) {
      if (s >= length) {
        throw new IOException("lz4: a damaged block (ends inside a sequence)");
      }
      int token = src[s++] & 0xff;
      int literals = token >>> 4;
      if (literals == 15) {
        int more;
        do {
          if (s >= length) {
            throw new IOException("lz4: a damaged block (literal length)");
          }
          more = src[s++] & 0xff;
          literals += more;
          if (literals > end - d) {
            throw new IOException("lz4: a damaged block (literals past the block)");
          }
        } while (more == 255);
      }
      if (literals > length - s || literals > end - d) {
        throw new IOException("lz4: a damaged block (literals past the block)");
      }
      System.arraycopy(src, s, dst, d, literals);
      s += literals;
      d += literals;
      if (s == length) {
        return d - start; // the last sequence has literals only
      }
      if (length - s < 2) {
        throw new IOException("lz4: a damaged block (match offset)");
      }
      int offset = (src[s] & 0xff) | (src[s + 1] & 0xff) << 8;
      s += 2;
      if (offset == 0 || offset > d) {
        throw new IOException("lz4: a damaged block (match before the window)");
      }
      int match = token & 0x0f;
      if (match == 15) {
        int more;
        do {
          if (s >= length) {
            throw new IOException("lz4: a damaged block (match length)");
          }
          more = src[s++] & 0xff;
          match += more;
          if (match > end - d) {
            throw new IOException("lz4: a damaged block (match past the block)");
          }
        } while (more == 255);
      }
      match += 4;
      if (match > end - d) {
        throw new IOException("lz4: a damaged block (match past the block)");
      }
      int from = d - offset;
      if (offset >= match) {
        System.arraycopy(dst, from, dst, d, match);
      } else {
        for (int i = 0; i < match; i++) {
          dst[d + i] = dst[from + i];
        }
      }
      d += match;
    }
  }

  /** A little-endian 32-bit word. */
  private int int32() throws IOException {
    byte[] word = new byte[4];
    readFully(word, 4);
    return le(word, 0);
  }

  private static int le(byte[] b, int i) {
    return (b[i] & 0xff) | (b[i + 1] & 0xff) << 8 | (b[i + 2] & 0xff) << 16 | (b[i + 3] & 0xff) << 24;
  }

  private void readFully(byte[] b, int length) throws IOException {
    readFully(b, 0, length);
  }

  private void readFully(byte[] b, int off, int length) throws IOException {
    if (in.readNBytes(b, off, length) < length) {
      throw new EOFException("lz4: truncated frame");
    }
  }

  @Override
  public void close() throws IOException {
    in.close();
  }
}
