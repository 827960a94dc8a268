"""Keyed event-time windows: one strategy per window kind (:mod:`sluice.windows.kinds`),
mergeable partial aggregates (:mod:`sluice.windows.aggregates`) and the epoch
(:mod:`sluice.windows.operator`)."""
