"""Guided: measure a design over every dimension, fit the model, move where it points, stop when confirmed.

The space is what the config lists: its dimensions are the setting fields whose values vary
(`search.space`: SGLang's steps x topk x draft tokens, vLLM's methods x K, ...), plus each depth
ladder's extensions up to `search.max_depth` (chains by default; trees per branching and draft-token
budget only with `search.extend_depth: all`).

1. design: the baseline(s) and a few settings that together hold every dimension's lowest, second and
   highest value and every category (`space.cover_design`: on SGLang's space a shallow chain, a narrow
   and a wide tree; on vLLM's one setting per method), at the target concurrency levels
   (`search.target_concurrency`; default every level: across concurrency);
2. fit `specfrontier.perfmodel` to every cell measured so far (setting shape from the stored parameters,
   acceptance from the stored counters) and predict every candidate;
3. explore before confirming: while a dimension has fewer than two measured values (a design setting
   failed to run), or a drafter family the model cannot predict has no measured setting, measure one
   (a family never measured is a reason to measure, never a silent "confirmed");
4. per target level, with m the best measured setting there (the objective's median over repeats):
   - measure the unmeasured candidate the model ranks highest if it stands above m by more than the error
     the model states for that comparison: its predicted ratio to the model's own prediction of m, against
     the stated error of such ratios (`Prediction.halfwidth_against_best`, calibrated on the model's own
     held-out settings: neighbours share much of the model's error, so it is smaller than either
     prediction's); where none is stated, its prediction against m's measurement with its own stated error
     (`perfmodel.calibration`); and by at least `search.min_gain`;
   - else step from m along every dimension (`space.steps_along`: the next value up and down, each
     other category; and one depth deeper or shallower on m's ladder), the most promising move first,
     unless the model places it below m by more than the stated error of that comparison; a move whose
     kind has no stated error is never ruled out, and a model fitted on fewer speculative settings than the
     dimensions + 2 orders moves but rules none out;
5. with no move left, measure the unmeasured candidate the model ranks highest if it stands above m by more
   than `search.min_gain` (within its error: the model does not separate it from m, so it measures instead
   of guessing);
6. stop when every target level is confirmed: nothing unmeasured stands above m by more than that, and
   the moves the model cannot rule out have been measured. The stop reason names the values of each
   dimension explored and the stated errors the search stopped on.

The answer is always a MEASURED setting: the model only chooses what to measure. When the model cannot
be fitted (too few cells), the move rule alone decides, and the stop reason says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from specfrontier.config.search import SearchConfig
from specfrontier.engines.base import EngineSetting
from specfrontier.errors import SpecFrontierError
from specfrontier.perfmodel import FittedModel, ModelCell, Prediction, fit_model, setting_params
from specfrontier.search.base import Done, Proposal, Step
from specfrontier.search.ladder import Ladder, build_ladders
from specfrontier.search.observe import Observations
from specfrontier.search.space import (
    Dimension,
    cover_design,
    describe_coverage,
    dimensions,
    steps_along,
    unexplored,
    value_of,
)


def model_cells(obs: Observations, workload: str) -> list[ModelCell]:
    """The run's cells of one workload as the model's input (medians over repeats, pooled acceptance)."""
    cells = []
    for (name, w, c), figures in sorted(obs.figures.items()):
        if w != workload:
            continue
        params = setting_params(obs.params.get(name, {}), where=f"settings[{name}]")
        counters = obs.counters.get((name, w, c))
        spec = counters is not None and params.speculative
        cells.append(
            ModelCell(
                setting=name,
                params=params,
                concurrency=c,
                per_request_tok_s=figures["per_request_tok_s_p50"].median,
                aggregate_tok_s=figures["aggregate_tok_s"].median,
                capacity=obs.capacity.get(name),
                acceptance_length=counters.acceptance_length if spec and counters else None,
                acceptance_per_position=counters.per_position_rate if spec and counters else (),
            )
        )
    return cells


class GuidedStrategy:
    name = "guided"

    def __init__(self, settings: Sequence[EngineSetting], concurrency: Sequence[int], search: SearchConfig) -> None:
        self.search = search
        self.targets = tuple(search.target_concurrency or concurrency)
        self.ladders: list[Ladder] = build_ladders(settings, search.max_depth, search.extend_depth)
        self.baselines = [s for s in settings if not s.speculative]
        self.candidates: dict[str, EngineSetting] = {s.name: s for s in settings}
        self.ladder_of: dict[str, tuple[Ladder, int]] = {}
        for ladder in self.ladders:
            for depth in ladder.depths():
                s = ladder.setting_at(depth)
                self.candidates.setdefault(s.name, s)
                self.ladder_of[s.name] = (ladder, depth)
        self.dims: list[Dimension] = dimensions(list(self.candidates.values()))
        # The design holds the ends of what the config lists; the moves also reach each ladder's extensions.
        self.design: list[EngineSetting] = [*self.baselines, *cover_design(settings, dimensions(settings))]
        self.model: FittedModel | None = None
        self.model_note = ""
        self.fitted_settings = 0

    def propose(self, obs: Observations, attempted: set[str]) -> Step:
        for s in self.design:
            if s.name not in attempted:
                return Proposal(s, "design: " + self._design_role(s), self.targets)
        self._fit(obs)
        explore = self._explore(obs, attempted)
        if isinstance(explore, Proposal):
            return explore
        objective = self.search.objective
        confirmed: list[str] = []
        for c in self.targets:
            measured = {
                n: f.median
                for n in self.candidates
                if (f := obs.figure(n, c, objective)) is not None and f.median is not None
            }
            if not measured:
                continue
            best = max(measured, key=lambda n: measured[n])
            value = measured[best]
            step = self._beyond(c, best, value, attempted)
            if step is None:
                step = self._move(c, best, value, attempted)
            if step is None:
                step = self._unseparated(c, best, value, attempted)
            if step is not None:
                return step
            confirmed.append(f"C={c}: {best} ({value:.1f})")
        explored = f"; explored: {self.explored(obs)}"
        if explore is not None:
            return Done(f"not confirmed: {explore.reason}; best measured at {'; '.join(confirmed)}{explored}")
        return Done(f"confirmed within the noise at {'; '.join(confirmed)}{explored}{self.model_note}")

    def explored(self, obs: Observations) -> str:
        """Per dimension, the values measured of those the space holds (for the trace and the report)."""
        measured = [s for n, s in self.candidates.items() if obs.measured(n)]
        return describe_coverage(self.dims, measured)

    def _design_role(self, s: EngineSetting) -> str:
        if not s.speculative:
            return "baseline (no speculation)"
        shown = ", ".join(f"{d.field} {d.label([value_of(s, d.field)]) or value_of(s, d.field)}" for d in self.dims)
        return f"covers the space's dimensions ({shown})" if shown else "the speculative setting listed"

    def _explore(self, obs: Observations, attempted: set[str]) -> Proposal | Done | None:
        """A setting that explores a dimension nothing measured yet (an ordered one with one measured
        value, a category such as a drafter method never measured); Done(why) when one is unexplored but
        all its settings were tried; None when every dimension is explored."""
        measured = [s for n, s in self.candidates.items() if obs.measured(n)]
        for dim, missing in unexplored(self.dims, measured):
            untried = [
                s
                for n, s in self.candidates.items()
                if n not in attempted and s.speculative and value_of(s, dim.field) in missing
            ]
            shown = dim.label(missing)
            if not untried:
                return Done(f"{dim.field} {shown} is not explored (its settings failed to run)")
            pick = untried[0]
            if dim.ordered:
                seen = dim.label(v for v in dim.values if v not in missing)
                why = f"explore {dim.field}: no value but {seen or 'none'} measured yet"
            else:
                value = value_of(pick, dim.field)
                blind = any(self._predict(pick.name, c) is None for c in self.targets)
                why = f"explore {dim.field} {value}: never measured" + (
                    ", the model cannot predict it" if blind else ""
                )
            return Proposal(pick, why, self.targets)
        return None

    @property
    def _trusted(self) -> bool:
        """Whether the model may rule a move out: fitted on at least two speculative settings more than
        the space has dimensions. On fewer its leave-one-out error comes from a handful of cells (on the
        dense 3-D space, 4 cells at one level gave 4 % and ruled out the best tree, 5 % above the pick),
        so it only orders the moves."""
        return self.model is not None and self.fitted_settings >= len(self.dims) + 2

    def _fit(self, obs: Observations) -> None:
        self.fitted_settings = sum(1 for n, s in self.candidates.items() if s.speculative and obs.measured(n))
        self.model, self.model_note = None, ""
        workloads = obs.workloads
        if not workloads:
            return
        try:
            self.model = fit_model(model_cells(obs, workloads[0]))
        except SpecFrontierError as exc:
            self.model_note = f"; the model could not be fitted ({exc}), so only moves were checked"
            return
        self.model_note = f"; model: {self.model.form} cycle form, stated error {self.model.calibration.describe()}"

    def _prediction(self, name: str, c: int) -> Prediction | None:
        if self.model is None:
            return None
        try:
            return self.model.predict(setting_params(self.candidates[name].parameters()), c, stated=False)
        except SpecFrontierError:
            return None

    def _predict(self, name: str, c: int) -> float | None:
        p = self._prediction(name, c)
        if p is None:
            return None
        return p.aggregate_tok_s if self.search.objective == "aggregate_tok_s" else p.per_request_tok_s

    def _band(self, name: str, c: int) -> float | None:
        """The error the model states for its prediction of `name` at C = c (its kind's, calibrated on the
        model's held-out errors), at least `search.min_gain`; None when the model states none."""
        p = self._prediction(name, c)
        if p is None or p.halfwidth is None:
            return None
        return max(self.search.min_gain, p.halfwidth)

    def _judged(self, name: str, c: int, best: str, value: float) -> tuple[float, float | None] | None:
        """(`name`'s standing against the measured best m at C: its predicted ratio to the model's own
        prediction of m, the stated error of such ratios), calibrated on held-out settings against the best
        fitted one (`Prediction.halfwidth_against_best`: neighbours share much of the model's error); without
        it, the prediction over m's measurement with the prediction's own error. The error is at least
        `search.min_gain`, None when the model states none; None overall when nothing is predicted."""
        p, here = self._predict(name, c), self._predict(best, c)
        if p is None:
            return None
        prediction = self._prediction(name, c)
        against = None if prediction is None else prediction.halfwidth_against_best
        if here and against is not None:
            return p / here, max(self.search.min_gain, against)
        return p / value, self._band(name, c)

    def _beyond(self, c: int, best: str, value: float, attempted: set[str]) -> Proposal | None:
        judged = {n: j for n in self.candidates if n not in attempted and (j := self._judged(n, c, best, value))}
        beyond = {n: ratio for n, (ratio, band) in judged.items() if band is not None and ratio > 1 + band}
        if not beyond:
            return None
        top = max(beyond, key=lambda n: beyond[n])
        band = judged[top][1] or 0.0
        return Proposal(
            self.candidates[top],
            f"the model predicts {self._predict(top, c) or 0.0:.1f} at C={c}, {100 * (beyond[top] - 1):+.1f} % against "
            f"the measured best {best} ({value:.1f}), beyond its stated error (+/-{100 * band:.1f} %)",
            self.targets,
        )

    def _unseparated(self, c: int, best: str, value: float, attempted: set[str]) -> Proposal | None:
        """The unmeasured candidate the model ranks highest when it stands above the measured best by more than
        `search.min_gain` yet within the model's error (so not measured as `_beyond`): the model does not
        separate it from the best, so it is measured rather than ruled out; the search confirms only when
        nothing unmeasured stands that far above the best. A model fitted on too few settings to be trusted
        has moves only."""
        if not self._trusted:
            return None
        judged = {n: j for n in self.candidates if n not in attempted and (j := self._judged(n, c, best, value))}
        above = {n: ratio for n, (ratio, _) in judged.items() if ratio > 1.0 + self.search.min_gain}
        if not above:
            return None
        top = max(above, key=lambda n: above[n])
        band = judged[top][1]
        shown = "no stated error" if band is None else f"+/-{100 * band:.1f} %"
        return Proposal(
            self.candidates[top],
            f"the model predicts {self._predict(top, c) or 0.0:.1f} at C={c}, {100 * (above[top] - 1):+.1f} % against "
            f"the measured best {best} ({value:.1f}) but within its error ({shown}): it does not separate them, "
            "so measure",
            self.targets,
        )

    def moves(self, name: str, c: int | None = None) -> list[tuple[str, EngineSetting]]:
        """(dimension, setting) one move from `name` along every dimension of the space (at C = `c` also
        the model's best at each next value), and one depth along its ladder (which reaches extensions
        past the listed depths); a baseline moves to the design's speculative settings."""
        current = self.candidates[name]
        if not current.speculative:
            return [("speculation", s) for s in self.design if s.speculative]
        out: dict[str, tuple[str, EngineSetting]] = {}
        pool = list(self.candidates.values())
        for dim in self.dims:
            score = None if c is None else lambda s, c=c: self._predict(s.name, c)
            for s in steps_along(current, dim, pool, self.dims, score):
                out.setdefault(s.name, (dim.field, s))
        if name in self.ladder_of:
            ladder, depth = self.ladder_of[name]
            for d in ladder.neighbours(depth):
                s = ladder.setting_at(d)
                out.setdefault(s.name, ("depth", s))
        return list(out.values())

    def _move(self, c: int, best: str, value: float, attempted: set[str]) -> Proposal | None:
        ranked = sorted(
            ((dim, s, self._predict(s.name, c)) for dim, s in self.moves(best, c) if s.name not in attempted),
            key=lambda item: -(item[2] if item[2] is not None else float("inf")),
        )  # the more promising move first
        if not self._trusted:
            ranked = [(dim, setting, None) for dim, setting, _ in ranked]  # ranked, but none ruled out
        for dim, setting, predicted in ranked:
            judged = None if predicted is None else self._judged(setting.name, c, best, value)
            if judged is not None and judged[1] is not None and judged[0] < 1.0 - judged[1]:
                continue  # the model rules it out beyond its stated error (of the ratio to m, where stated)
            shown = f"predicted {predicted:.1f}" if predicted is not None else "no prediction"
            return Proposal(
                setting,
                f"move along {dim} from the measured best {best} at C={c} ({value:.1f}; {shown})",
                self.targets,
            )
        return None


__all__ = ["GuidedStrategy", "model_cells"]
