"""Which columns a Spark SQL expression of the spec (``select:``, ``filter:``) may read.

Found from the text, without Spark: every identifier outside string literals and comments
(a word, or a back-quoted name) that names a column, compared as Spark compares names (case
insensitively). It may name more columns than the expression reads (a lambda variable or a
struct field that shares a column's name), never fewer: a column named here is only checked
more strictly than it needs to be (:meth:`sluice.spec.model.PipelineSpec.read_columns`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["referenced"]

# the tokens that matter, in the order they are tried at each position: comments, string
# literals (single or double quoted, with backslash escapes), back-quoted names (a doubled
# back quote is one), plain words
_TOKEN = re.compile(
    r"""--[^\n]*
      | /\*.*?(?:\*/|\Z)
      | '(?:\\.|[^'\\])*(?:'|\Z)
      | "(?:\\.|[^"\\])*(?:"|\Z)
      | `((?:``|[^`])*)(?:`|\Z)
      | ([A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE | re.DOTALL,
)


def referenced(expression: str, columns: Iterable[str]) -> set[str]:
    """The names in ``columns`` that ``expression`` may read (spelled as in ``columns``)."""
    by_folded: dict[str, list[str]] = {}
    for name in columns:
        by_folded.setdefault(name.casefold(), []).append(name)
    found: set[str] = set()
    for match in _TOKEN.finditer(expression):
        quoted, word = match.group(1), match.group(2)
        name = quoted.replace("``", "`") if quoted is not None else word
        if name is not None:
            found.update(by_folded.get(name.casefold(), ()))
    return found
