"""Root of every error Sluice raises on purpose.

Subpackages define their own ``exceptions.py`` whose classes derive from :class:`SluiceError`.
Messages name the pipeline, epoch and object key wherever they are known.
"""

from __future__ import annotations

__all__ = ["SluiceError"]


class SluiceError(Exception):
    """Base class of all Sluice errors."""
