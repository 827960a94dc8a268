package sluice.bench;

import java.util.Collection;
import org.apache.flink.connector.file.src.FileSourceSplit;
import org.apache.flink.connector.file.src.assigners.FileSplitAssigner;

/**
 * Creates an {@link OrderedSplitAssigner}. A Java class because the provider is serialised
 * into the job graph, which a py4j proxy cannot be.
 */
public final class OrderedSplitAssignerProvider implements FileSplitAssigner.Provider {
    private static final long serialVersionUID = 1L;

    @Override
    public FileSplitAssigner create(Collection<FileSourceSplit> splits) {
        return new OrderedSplitAssigner(splits);
    }
}
