"""Stream–stream joins in event time (docs/joins.md): :class:`~sluice.joins.operator.
JoinOperator`."""
