"""Operators: what an epoch computes over its records and the state ``S_k``.

:mod:`sluice.operators.base` is the leaf every operator imports (the contract, shared types);
:mod:`sluice.operators.registry` chooses the operator of a spec. Windows live in
:mod:`sluice.windows`, keyed process functions in :mod:`sluice.keyed`, the stateless operator in
:mod:`sluice.operators.stateless`.
"""
