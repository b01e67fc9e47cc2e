"""The search loop shared by the server sweep and the virtual simulator sweep.

    while (setting := planner.next_setting()) is not None:
        measure every cell of `setting`          # the caller: Sweep or VirtualSweep

`next_setting` reads the run back from the store, asks the strategy for the next setting, checks the
budget, registers the setting in the store (so a crash keeps it) and returns it. The planner keeps a
trace of every choice, the reason it stopped and, per dimension of the space (`search.space`: the
setting fields the listed settings vary), the values measured; `tune` prints all three.

Budget (checked before every launch of a setting not yet launched in this run):
- `search.max_launches`: launches so far (settings ever launched in this run, failed ones included);
- `search.max_engine_s`: engine-seconds so far (see `observe`) plus the expected cost of one more
  launch, the mean over the settings launched so far; the first launch is always allowed.
"""

from __future__ import annotations

from specfrontier.config import TuneConfig
from specfrontier.engines.base import EngineSetting
from specfrontier.search.adaptive import AdaptiveStrategy
from specfrontier.search.base import Done, Strategy
from specfrontier.search.grid import GridStrategy
from specfrontier.search.guided import GuidedStrategy
from specfrontier.search.observe import LAUNCHED, Observations, Observer
from specfrontier.search.space import describe_coverage, dimensions
from specfrontier.store import Store


def make_strategy(config: TuneConfig) -> Strategy:
    """The strategy named by `config.search.strategy`."""
    search = config.search
    if search.strategy == "adaptive":
        return AdaptiveStrategy(config.all_settings(), config.concurrency, search)
    if search.strategy == "guided":
        return GuidedStrategy(config.all_settings(), config.concurrency, search)
    return GridStrategy(config.all_settings())


class SearchPlanner:
    """Feeds a sweep one setting at a time (see the module docstring)."""

    def __init__(self, config: TuneConfig, store: Store, run_id: str, strategy: Strategy | None = None) -> None:
        self.config, self.store, self.run_id = config, store, run_id
        self.strategy = strategy or make_strategy(config)
        self.observer = Observer(store, run_id)
        self.yielded: set[str] = set()
        self.levels: dict[str, tuple[int, ...] | None] = {}
        """Setting name -> the concurrency levels its proposal asked for (None: all)."""
        self.trace: list[str] = []
        self.stop_reason: str | None = None
        self.explored: str | None = None
        """Per dimension of the space, the values measured of those listed (set when the search stops)."""
        self._known: dict[str, EngineSetting] = {s.name: s for s in config.all_settings()}

    def next_setting(self) -> EngineSetting | None:
        obs = self.observer.observe()
        attempted = self.yielded | {name for name, status in obs.status.items() if status == "done"}
        step = self.strategy.propose(obs, attempted)
        if isinstance(step, Done):
            self._stop(step.reason, obs)
            return None
        setting = step.setting
        self._known.setdefault(setting.name, setting)
        if obs.status.get(setting.name) not in LAUNCHED:
            over = self._over_budget(obs, setting)
            if over is not None:
                self._stop(over, obs)
                return None
        self._register(setting, obs)
        self.yielded.add(setting.name)
        self.levels[setting.name] = step.concurrency
        self.trace.append(f"{setting.name}: {step.reason}")
        return setting

    def _stop(self, reason: str, obs: Observations) -> None:
        self.stop_reason = reason
        listed = list(self.config.all_settings())
        dims = dimensions(listed)
        if dims:
            self.explored = describe_coverage(dims, [s for n, s in self._known.items() if obs.measured(n)])

    def _over_budget(self, obs: Observations, setting: EngineSetting) -> str | None:
        search = self.config.search
        # Launched: as stored, and every setting this planner has handed out, which may not have reported
        # its start yet (settings measured side by side on Ray are asked for before their workers write).
        launched = {name for name, status in obs.status.items() if status in LAUNCHED} | self.yielded
        if search.max_launches is not None and len(launched) >= search.max_launches:
            return (
                f"budget: search.max_launches = {search.max_launches} launches used; "
                f"{setting.name} (next: {self.strategy.name}) not launched"
            )
        if search.max_engine_s is not None and obs.launches:
            expected = obs.engine_s / obs.launches
            if obs.engine_s + expected > search.max_engine_s:
                return (
                    f"budget: {obs.engine_s:.0f} of search.max_engine_s = {search.max_engine_s:g} engine-seconds used; "
                    f"{setting.name} would need about {expected:.0f} more, not launched"
                )
        return None

    def _register(self, setting: EngineSetting, obs: Observations) -> None:
        self.store.add_setting(
            self.run_id,
            setting_id=setting.name,
            position=len(obs.status),
            name=setting.name,
            params=setting.parameters(),
            speculative=setting.speculative,
        )


__all__ = ["SearchPlanner", "make_strategy"]
