"""The ground floor: the records Sluice stores and the interfaces its parts meet at.

Nothing here imports anything else from sluice (``lint-imports`` checks it), so every floor
above can depend on it: :mod:`~sluice.contracts.records` (plans, attempts, checkpoints,
state parts, staged output, watermarks), :mod:`~sluice.contracts.layout` (where each record
is stored), :mod:`~sluice.contracts.sources` (a rewindable source, generic over its offsets and
ranges), :mod:`~sluice.contracts.sinks` (a two-phase-commit sink) and
:mod:`~sluice.contracts.operators` (an epoch's input and output, the operator).
docs/architecture.md draws the floors.
"""
