"""Guided: measure a small design, fit the performance model, measure where it points, stop when confirmed.

1. design: the baseline(s) and, per depth ladder, its shallowest and deepest listed depths, at the
   target concurrency levels (`search.target_concurrency`; default every level: across concurrency);
2. fit `specfrontier.perfmodel` to every cell measured so far (setting shape from the stored parameters,
   acceptance from the stored counters) and predict every candidate: the listed settings, and each
   ladder's depths up to `search.max_depth`;
3. per target level, with m the best measured setting there (the objective's median over repeats):
   - measure the unmeasured candidate with the highest prediction if it is predicted to beat m by more
     than the noise: the model's own error (its leave-one-out RMS) and at least `search.min_gain`;
   - else measure m's unmeasured ladder neighbours (one depth shallower and deeper), unless the model
     predicts one below m by more than that noise;
4. stop when every target level is confirmed: nothing unmeasured is predicted to beat the measured best
   beyond the noise, and the neighbours the model cannot rule out have been measured.

The answer is always a MEASURED setting: the model only chooses what to measure. When the model cannot
be fitted (too few cells), the neighbour rule alone decides, and the stop reason says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from specfrontier.config.search import SearchConfig
from specfrontier.engines.base import EngineSetting
from specfrontier.errors import SpecFrontierError
from specfrontier.perfmodel import FittedModel, ModelCell, fit_model, setting_params
from specfrontier.search.base import Done, Proposal, Step
from specfrontier.search.ladder import Ladder, build_ladders, depth_of
from specfrontier.search.observe import Observations


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
        self.ladders: list[Ladder] = build_ladders(settings, search.max_depth)
        self.baselines = [s for s in settings if not s.speculative]
        self.candidates: dict[str, EngineSetting] = {s.name: s for s in settings}
        self.ladder_of: dict[str, tuple[Ladder, int]] = {}
        for ladder in self.ladders:
            for depth in ladder.depths():
                s = ladder.setting_at(depth)
                self.candidates.setdefault(s.name, s)
                self.ladder_of[s.name] = (ladder, depth)
        self.design: list[EngineSetting] = list(self.baselines)
        for ladder in self.ladders:
            listed = ladder.listed_depths
            self.design += [ladder.setting_at(d) for d in dict.fromkeys((listed[0], listed[-1]))]
        self.model: FittedModel | None = None
        self.model_note = ""

    def propose(self, obs: Observations, attempted: set[str]) -> Step:
        for s in self.design:
            if s.name not in attempted:
                return Proposal(s, "design: " + self._design_role(s), self.targets)
        self._fit(obs)
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
                step = self._neighbour(c, best, value, attempted)
            if step is not None:
                return step
            confirmed.append(f"C={c}: {best} ({value:.1f})")
        return Done(f"confirmed within the noise at {'; '.join(confirmed)}{self.model_note}")

    def _design_role(self, s: EngineSetting) -> str:
        if not s.speculative:
            return "baseline (no speculation)"
        depth = depth_of(s)
        return f"depth {depth}, an end of its ladder's listed range (the model interpolates between)"

    def _fit(self, obs: Observations) -> None:
        self.model, self.model_note = None, ""
        workloads = obs.workloads
        if not workloads:
            return
        try:
            self.model = fit_model(model_cells(obs, workloads[0]))
        except SpecFrontierError as exc:
            self.model_note = f"; the model could not be fitted ({exc}), so only neighbours were checked"
            return
        loo = self.model.loo_rms.get(self.model.form)
        error = f"leave-one-out error {loo:.0%}" if loo is not None else "no leave-one-out error (too few cells)"
        self.model_note = f"; model: {self.model.form} cycle form, {error}"

    def _predict(self, name: str, c: int) -> float | None:
        if self.model is None:
            return None
        try:
            p = self.model.predict(setting_params(self.candidates[name].parameters()), c)
        except SpecFrontierError:
            return None
        return p.aggregate_tok_s if self.search.objective == "aggregate_tok_s" else p.per_request_tok_s

    def _band(self) -> float:
        loo = self.model.loo_rms.get(self.model.form) if self.model is not None else None
        return max(self.search.min_gain, loo or 0.0)

    def _beyond(self, c: int, best: str, value: float, attempted: set[str]) -> Proposal | None:
        predicted = {n: p for n in self.candidates if n not in attempted and (p := self._predict(n, c)) is not None}
        if not predicted:
            return None
        top = max(predicted, key=lambda n: predicted[n])
        if predicted[top] <= value * (1.0 + self._band()):
            return None
        return Proposal(
            self.candidates[top],
            f"the model predicts {predicted[top]:.1f} at C={c}, above the measured best {best} ({value:.1f})",
            self.targets,
        )

    def _neighbour(self, c: int, best: str, value: float, attempted: set[str]) -> Proposal | None:
        if best in self.ladder_of:
            ladder, depth = self.ladder_of[best]
            names = [ladder.setting_at(d).name for d in ladder.neighbours(depth)]
        elif best in {s.name for s in self.baselines}:
            names = [ladder.setting_at(ladder.listed_depths[0]).name for ladder in self.ladders]
        else:
            names = []
        ranked = sorted(
            ((n, self._predict(n, c)) for n in names if n not in attempted),
            key=lambda item: -(item[1] if item[1] is not None else float("inf")),
        )  # the more promising neighbour first
        for name, predicted in ranked:
            if predicted is not None and predicted < value * (1.0 - self._band()):
                continue  # the model rules it out beyond its own error
            shown = f"predicted {predicted:.1f}" if predicted is not None else "no prediction"
            return Proposal(
                self.candidates[name],
                f"neighbour of the measured best {best} at C={c} ({value:.1f}; {shown})",
                self.targets,
            )
        return None


__all__ = ["GuidedStrategy", "model_cells"]
