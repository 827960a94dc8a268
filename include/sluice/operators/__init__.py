"""Operators: what an epoch computes over its records and the state ``S_k``.

The contract is :mod:`sluice.contracts.operators`; this package holds what implementations
share (:mod:`sluice.operators.base`, record classification in :mod:`sluice.operators.records`,
watermarks, SQL text) and the stateless operator. Windows live in :mod:`sluice.windows`, keyed
process functions in :mod:`sluice.keyed`; :func:`sluice.pipeline.operator_for` chooses a spec's.
"""
