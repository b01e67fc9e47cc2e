"""The format-neutral table every report section is drawn from, and `percent_1dp`, a share as its cells show it.

Its own module so that the modules building tables (`tables`, `metric_tables`, `bias`, `compare`) and
the renderers (terminal, Markdown, HTML) all depend on it and not on each other: `tables` lists the
report's tables, `metric_tables` builds some of them, and neither has to import the other to share the
type.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Table:
    """Title, header row, rows of text cells and notes (each note defines what the table shows)."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def percent_1dp(share: float | None) -> str:
    """A share as a percentage with one decimal (0.1234 -> '12.3%'); '-' for None (no figure)."""
    return "-" if share is None else f"{share:.1%}"


__all__ = ["Table", "percent_1dp"]
