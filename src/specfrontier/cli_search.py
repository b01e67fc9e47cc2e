"""`tune --search ...`: the search options on the command line, and the search's trace after a run.

The command line only overrides the config's `search:` block (validated by the same model, so an
error names the option and the fix); a resumed run keeps the search it was started with.
"""

from __future__ import annotations

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from specfrontier.config import TuneConfig
from specfrontier.config.common import describe_validation_error
from specfrontier.errors import ConfigError
from specfrontier.search.planner import SearchPlanner


def apply_search_options(
    cfg: TuneConfig, *, strategy: str | None, max_launches: int | None, max_engine_s: float | None
) -> TuneConfig:
    """`cfg` with `--search`, `--max-launches` and `--max-engine-s` applied to its `search:` block."""
    overrides = {"strategy": strategy, "max_launches": max_launches, "max_engine_s": max_engine_s}
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return cfg
    data = cfg.model_dump(mode="json")
    data["search"] = {**data["search"], **given}
    try:
        return type(cfg).model_validate(data)
    except ValidationError as exc:
        option = "--" + next(iter(given)).replace("_", "-").replace("strategy", "search")
        raise ConfigError(describe_validation_error(exc, option)) from exc


def refuse_on_resume(strategy: str | None, max_launches: int | None, max_engine_s: float | None) -> None:
    """A resumed run continues the search it was started with (its stored config)."""
    if strategy is not None or max_launches is not None or max_engine_s is not None:
        raise ConfigError(
            "--search/--max-launches/--max-engine-s with --resume: a resumed run keeps its stored search; "
            "fix: drop these options, or start a new run"
        )


def print_search_trace(planner: SearchPlanner | None, console: Console) -> None:
    """Which settings the search measured and why, and why it stopped (nothing for a plain grid)."""
    if planner is None:
        return
    search = planner.config.search
    if search.strategy == "grid" and not search.budgeted:
        return
    listed = len(planner.config.all_settings())
    console.print(
        f"\n[bold]Search[/bold] ({search.strategy}): {len(planner.trace)} setting(s) launched "
        f"({listed} listed); objective {search.objective} at C="
        f"{','.join(map(str, search.target_concurrency or planner.config.concurrency))}"
    )
    for line in planner.trace:
        console.print(f"  {escape(line)}")
    if planner.stop_reason:
        console.print(f"  stopped: {escape(planner.stop_reason)}")


__all__ = ["apply_search_options", "print_search_trace", "refuse_on_resume"]
