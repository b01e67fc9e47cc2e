"""`tune`'s `verify_schedule`: after the search, the measured best depth per batch size runs as one setting.

A schedule built from static cells is a prediction; this measures it. When the wrapped strategy is done,
the schedule is built from the run's own cells (`choose.depth_schedule`, as `specfrontier schedule` writes
it), turned into the engine's schedule setting (`EngineSetting.with_schedule`: SGLang's adaptive config
with one pinned candidate per range, 0 where no speculation won) and proposed at every level. The report
then compares it per level with the best static setting (`analysis.schedule_check`). The strategy reads
only the store, so a resumed run builds the same schedule from the same cells.
"""

from __future__ import annotations

from specfrontier.analysis.summary import load_run
from specfrontier.config import TuneConfig
from specfrontier.errors import ConfigError
from specfrontier.schedules.choose import depth_schedule
from specfrontier.search.base import Done, Proposal, Step, Strategy
from specfrontier.search.observe import Observations
from specfrontier.search.planner import SearchPlanner, make_strategy
from specfrontier.store import Store

SCHEDULE_SETTING = "depth-schedule"
"""The name of the verified schedule's setting in the run."""


class VerifySchedule:
    """Wraps a strategy: its proposals, then the schedule built from what it measured, then done."""

    def __init__(self, inner: Strategy, store: Store, run_id: str) -> None:
        self.inner, self.store, self.run_id = inner, store, run_id
        self.name = inner.name

    def propose(self, obs: Observations, attempted: set[str]) -> Step:
        step = self.inner.propose(obs, attempted)
        if not isinstance(step, Done) or SCHEDULE_SETTING in attempted:
            return step
        data = load_run(self.store, self.run_id).complete_evidence()
        try:
            schedule = depth_schedule(data)
            ranges = [(e.batch_lo, e.depth) for e in schedule.entries]
            setting = schedule.template.with_schedule(ranges, SCHEDULE_SETTING)
        except (ConfigError, ValueError) as exc:
            return Done(f"{step.reason}; verify_schedule: no schedule to measure ({exc})")
        if len(schedule.entries) == 1:  # the schedule would be a static setting already measured
            only = schedule.entries[0]
            return Done(
                f"{step.reason}; verify_schedule: nothing to measure: {only.setting} (depth {only.depth}) is the "
                "best at every level, and a one-range schedule is that static setting run through the engine's "
                "per-batch-size path (never recommended instead of it)"
            )
        shown = ", ".join(f"{e.batch_lo}-{e.batch_hi}: {e.depth}" for e in schedule.entries)
        return Proposal(setting, f"verify_schedule: the measured best depth per batch size ({shown}) as one setting")


def planner_for(config: TuneConfig, store: Store, run_id: str) -> SearchPlanner:
    """The search of a run (both sweeps use it): the config's strategy, then the schedule's verification
    when the config asks for it."""
    strategy = make_strategy(config)
    if config.verify_schedule:
        strategy = VerifySchedule(strategy, store, run_id)
    return SearchPlanner(config, store, run_id, strategy)


__all__ = ["SCHEDULE_SETTING", "VerifySchedule", "planner_for"]
