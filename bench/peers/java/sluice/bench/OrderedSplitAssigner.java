package sluice.bench;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import org.apache.flink.connector.file.src.FileSourceSplit;
import org.apache.flink.connector.file.src.assigners.FileSplitAssigner;

/**
 * Hands out file splits first in, first out, in (path, offset) order, to whichever reader asks.
 *
 * <p>The bid files are named by their first event, so this is event-time order: each source
 * subtask then reads its splits in time order and its watermark never passes a record it has
 * yet to read. Flink's default (LocalityAwareSplitAssigner) keeps the splits in a HashSet.
 */
public final class OrderedSplitAssigner implements FileSplitAssigner {
    private static final Comparator<FileSourceSplit> ORDER =
            Comparator.comparing((FileSourceSplit s) -> s.path().toString())
                    .thenComparingLong(FileSourceSplit::offset);

    private final ArrayDeque<FileSourceSplit> splits = new ArrayDeque<>();

    public OrderedSplitAssigner(Collection<FileSourceSplit> splits) {
        addSplits(splits);
    }

    @Override
    public Optional<FileSourceSplit> getNext(String hostname) {
        return Optional.ofNullable(splits.pollFirst());
    }

    @Override
    public void addSplits(Collection<FileSourceSplit> more) {
        List<FileSourceSplit> all = new ArrayList<>(splits);
        all.addAll(more);
        all.sort(ORDER);
        splits.clear();
        splits.addAll(all);
    }

    @Override
    public Collection<FileSourceSplit> remainingSplits() {
        return new ArrayList<>(splits);
    }
}
