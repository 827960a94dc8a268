"""Shows what the crash suites report (the qos crash matrix) in pytest's terminal summary: a
line written while a test runs is captured and only shown when it fails."""

from __future__ import annotations

import pytest

REPORTS = pytest.StashKey[dict[str, list[str]]]()


def report(config: pytest.Config, title: str, lines: list[str]) -> None:
    """Show ``lines`` under ``title`` at the end of the run (in this process)."""
    config.stash.setdefault(REPORTS, {})[title] = lines


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    for title, lines in config.stash.get(REPORTS, {}).items():
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)
