"""The monitor's form inputs, derived from the run request's one declaration
(:class:`~sluice.protocol.request.RunRequest`): the action forms show its labels and help and
let the browser check what the model checks (docs/monitor.md, "Actions")."""

from __future__ import annotations

from sluice.protocol.request import RunRequest

__all__ = ["html_inputs"]


def html_inputs() -> dict[str, dict[str, str]]:
    """The monitor's form inputs: each field's label, help text, and what a browser checks
    before sending: ``pattern`` (names; the model's own, unanchored: HTML anchors it) and
    ``min`` (whole numbers)."""
    inputs: dict[str, dict[str, str]] = {}
    for name, info in RunRequest.model_fields.items():
        form = {"label": str(info.title), "help": str(info.description)}
        low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
        if low is not None:
            form["min"] = str(low)
        pattern = next((m.pattern for m in info.metadata if hasattr(m, "pattern")), None)
        if isinstance(pattern, str):
            form["pattern"] = pattern.removeprefix("^").removesuffix("\\Z").replace("-]", "\\-]")
        inputs[name] = form
    return inputs
