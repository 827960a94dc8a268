"""Sluice: exactly-once stateful stream processing from bounded PySpark batch runs."""

from sluice.exceptions import SluiceError

__all__ = ["SluiceError", "__version__"]
__version__ = "0.1.0"
