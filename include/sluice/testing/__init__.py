"""Test suites users run against their own extensions (the sink contract)."""
