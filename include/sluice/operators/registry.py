"""The one dispatch on a spec's operator: ``PipelineSpec.operator`` -> its class."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.keyed.operator import KeyedOperator
from sluice.operators.stateless import StatelessOperator
from sluice.windows.operator import WindowOperator

if TYPE_CHECKING:
    from sluice.operators.base import Operator
    from sluice.spec.model import PipelineSpec

__all__ = ["OPERATORS", "operator_for"]

OPERATORS: dict[str, type] = {
    "windows": WindowOperator,
    "process": KeyedOperator,
    "stateless": StatelessOperator,
}


def operator_for(spec: PipelineSpec) -> Operator:
    operator: Operator = OPERATORS[spec.operator](spec)
    return operator
