"""`recommend --traffic` on a simulator run of the seed profile (SGLang EAGLE3, no speculation and steps 3
and 4, C = 1-64): the answers worked by hand from the run's measured cells (weighted sums), the schedule's
gain, predictions between measured levels, and replicas for a peak (issue 33)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest

from builders import run_cli, run_virtual
from specfrontier.analysis import RunData, load_run
from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.metrics.slo import parse_slo
from specfrontier.perfmodel.decide import NOT_SEPARATED
from specfrontier.report.traffic import answer_line
from specfrontier.schedules.choose import depth_schedule
from specfrontier.store import Store
from specfrontier.traffic import parse_peak, traffic_answer
from specfrontier.traffic.crossing import Flip, unsettled_lead, worst_case
from specfrontier.traffic.figures import DayFigures, LevelFigure
from specfrontier.traffic.recommend import ScheduleAnswer

LEVELS = (1, 2, 4, 8, 16, 32, 64)
NIGHT = {1: 0.5, 2: 0.2, 4: 0.25, 16: 0.05}
"""Night-heavy: 95% of the time at C = 1-4."""
PEAK = {4: 0.05, 16: 0.2, 32: 0.4, 64: 0.35}
"""Peak-heavy: 95% of the time at C >= 16."""
DAY = {1: 0.3, 2: 0.2, 4: 0.2, 16: 0.1, 32: 0.1, 64: 0.1}
"""Night and peak: where a per-batch-size schedule can beat every static setting."""
SLO = "tpot_p90_ms=15"
CLI = [sys.executable, "-c", "from specfrontier.cli import main; main()"]


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The seed profile simulated in virtual time (one repeat; 8 rounds per cell give every cell a steady
    state, so every cell is evidence)."""
    settings = (
        SGLangSetting(name="no-spec"),
        SGLangSetting(name="s3", algorithm="EAGLE3", num_steps=3, eagle_topk=1),
        SGLangSetting(name="s4", algorithm="EAGLE3", num_steps=4, eagle_topk=1),
    )
    config = SimTuneConfig(engine=SimEngine(), settings=settings, concurrency=LEVELS, repeats=1, rounds_per_cell=8)
    path = tmp_path_factory.mktemp("seed") / "sim.db"
    store, run_id = run_virtual(config, path)
    store.close()
    return path, run_id


def _profile(tmp_path: Path, shares: dict[int, float]) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text("concurrency:\n" + "".join(f"  {c}: {s}\n" for c, s in shares.items()))
    return path


def _agg(data: RunData, setting: str, c: int) -> float:
    cell = data.cell(setting, c)
    assert cell is not None and cell.aggregate_tok_s.median is not None
    return cell.aggregate_tok_s.median


def _by_hand(data: RunData, shares: dict[int, float], slo_ms: float | None = None) -> dict[str, float]:
    """Sum over the profile of share x aggregate tok/s (x [TPOT p90 <= the SLO] when given), per setting."""
    out = {}
    for name in ("no-spec", "s3", "s4"):
        total = 0.0
        for c, share in shares.items():
            cell = data.cell(name, c)
            assert cell is not None and cell.tpot_p90_ms.median is not None
            if slo_ms is None or cell.tpot_p90_ms.median <= slo_ms:
                total += share * _agg(data, name, c)
        out[name] = total
    return out


def test_night_heavy_profile_picks_steps_4(seed_run: tuple[Path, str], tmp_path: Path) -> None:
    path, run_id = seed_run
    store = Store(path, read_only=True)
    data = load_run(store, run_id)
    hand = _by_hand(data, NIGHT)
    assert max(hand, key=lambda n: hand[n]) == "s4"
    answer = traffic_answer(store, run_id, _profile(tmp_path, NIGHT))
    assert answer.best.name == "s4"
    assert {f.name: f.aggregate_tok_s for f in answer.settings} == pytest.approx(hand)
    loss = {f.name: f.objective - answer.best.objective for f in answer.settings[1:]}
    assert loss == pytest.approx({n: hand[n] - hand["s4"] for n in ("no-spec", "s3")})
    assert all(f.predicted_share == 0 for f in answer.settings) and answer.model is None


def test_peak_heavy_profile_picks_steps_3_under_the_slo(seed_run: tuple[Path, str], tmp_path: Path) -> None:
    """Under a TPOT SLO the baseline misses at C >= 4 (its goodput is 0 there); s3 beats s4 at C = 32, 64."""
    path, run_id = seed_run
    store = Store(path, read_only=True)
    data = load_run(store, run_id, parse_slo(SLO))
    hand = _by_hand(data, PEAK, 15.0)
    assert max(hand, key=lambda n: hand[n]) == "s3"
    answer = traffic_answer(store, run_id, _profile(tmp_path, PEAK), parse_slo(SLO))
    assert answer.best.name == "s3"
    assert {f.name: f.goodput_tok_s for f in answer.settings} == pytest.approx(hand)
    assert answer.objective_name == "goodput tok/s"


def test_peak_heavy_profile_without_an_slo_ranks_steps_3_over_steps_4_and_says_the_baseline_wins(
    seed_run: tuple[Path, str], tmp_path: Path
) -> None:
    """Without a latency bound the simulated baseline's larger capacity (no draft KV) wins the peak: the
    answer says so instead of forcing a speculative pick, and still ranks steps 3 above steps 4 there."""
    path, run_id = seed_run
    store = Store(path, read_only=True)
    hand = _by_hand(load_run(store, run_id), PEAK)
    answer = traffic_answer(store, run_id, _profile(tmp_path, PEAK))
    assert answer.best.name == max(hand, key=lambda n: hand[n]) == "no-spec"
    assert hand["s3"] > hand["s4"]
    assert [f.name for f in answer.settings] == ["no-spec", "s3", "s4"]


def test_the_schedules_gain_over_the_best_static_setting(seed_run: tuple[Path, str], tmp_path: Path) -> None:
    path, run_id = seed_run
    store = Store(path, read_only=True)
    data = load_run(store, run_id)
    schedule = depth_schedule(data.complete_evidence())
    pick = {lv.concurrency: lv.setting for lv in schedule.levels}  # schedules/' own per-level choice
    assert pick[1] == "s4" and pick[64] == "no-spec"
    scheduled = sum(share * _agg(data, pick[c], c) for c, share in DAY.items())
    hand = _by_hand(data, DAY)
    best = max(hand, key=lambda n: hand[n])
    answer = traffic_answer(store, run_id, _profile(tmp_path, DAY))
    assert answer.best.name == best
    assert answer.schedule.figures is not None
    assert answer.schedule.figures.aggregate_tok_s == pytest.approx(scheduled)
    assert scheduled > hand[best]
    code_text = run_cli_text(path, run_id, _profile(tmp_path, DAY))
    gain = scheduled - hand[best]
    assert f"gain over {best}: +{gain:.1f} aggregate tok/s (+{100 * gain / hand[best]:.1f}%)" in code_text


def run_cli_text(path: Path, run_id: str, profile: Path, *more: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from specfrontier.cli import main; main()",
            "recommend",
            run_id,
            "--traffic",
            str(profile),
            "--store",
            str(path),
            *more,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.replace("\n    ", " ")


def test_levels_between_measured_ones_are_predictions_and_say_so(seed_run: tuple[Path, str], tmp_path: Path) -> None:
    path, run_id = seed_run
    store = Store(path, read_only=True)
    answer = traffic_answer(store, run_id, _profile(tmp_path, {1: 0.6, 3: 0.3, 12: 0.1}))
    for f in answer.settings:
        assert f.predicted_share == pytest.approx(0.4)
        measured, three, twelve = f.levels
        assert not measured.predicted and three.predicted and twelve.predicted
        assert three.error is not None and three.error > 0
    assert answer.model is not None and "performance model" in answer.model
    text = run_cli_text(path, run_id, _profile(tmp_path, {1: 0.6, 3: 0.3, 12: 0.1}))
    assert "predictions: up to 40.0% of the busy time rests on the performance model" in text
    assert "C=3 (30.0%): " in text and " P +/-" in text


def test_replicas_for_a_peak_of_users_and_of_requests(seed_run: tuple[Path, str], tmp_path: Path) -> None:
    path, run_id = seed_run
    store = Store(path, read_only=True)
    slos = parse_slo(SLO)
    data = load_run(store, run_id, slos)
    answer = traffic_answer(store, run_id, _profile(tmp_path, NIGHT), slos, parse_peak("100users"))
    for r in answer.replicas:
        ok = [c for c in LEVELS if (cell := data.cell(r.setting, c)) and cell.goodput and cell.goodput.slo_met]
        assert r.count == (math.ceil(100 / max(ok)) if ok else None)
    s3 = next(r for r in answer.replicas if r.setting == "s3")
    assert s3.count == math.ceil(100 / 64)  # s3 meets TPOT p90 <= 15 ms up to C = 64
    rate = traffic_answer(store, run_id, _profile(tmp_path, NIGHT), slos, parse_peak("30rps"))
    assert all(r.count is None or r.count >= 1 for r in rate.replicas)


def test_rate_profile_runs_each_setting_at_its_little_law_concurrency(
    seed_run: tuple[Path, str], tmp_path: Path
) -> None:
    """r = X(C) solved per setting: a faster setting serves the same rate with fewer requests in flight."""
    path, run_id = seed_run
    store = Store(path, read_only=True)
    profile = tmp_path / "rates.csv"
    profile.write_text("rate_req_s,share\n0.5,0.7\n2,0.3\n")
    answer = traffic_answer(store, run_id, profile)
    mean_c = {f.name: sum(lv.concurrency * lv.share for lv in f.levels) for f in answer.settings}
    assert mean_c["s4"] < mean_c["no-spec"]
    assert answer.objective_name == "per-user tok/s"
    assert answer.settings[0].name == "s4"


def test_cli_recommend_prints_the_definitions(
    seed_run: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, run_id = seed_run
    code, out, err = run_cli(
        monkeypatch, capsys, "recommend", run_id, "--traffic", str(_profile(tmp_path, NIGHT)), "--store", str(path)
    )
    assert code == 0, err
    assert "best static setting: s4" in out
    assert "per-user tok/s = per request" in out and "aggregate tok/s = output tokens per second of one server" in out


def test_report_with_traffic_adds_the_section_and_its_plots(seed_run: tuple[Path, str], tmp_path: Path) -> None:
    path, run_id = seed_run
    profile = _profile(tmp_path, DAY)
    page = tmp_path / "r.html"
    base = [*CLI, "report", run_id, "--store", str(path), "--traffic", str(profile)]
    done = subprocess.run([*base, "-f", "html", "-o", str(page)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert '<section id="traffic">' in html and '<a href="#traffic">Traffic</a>' in html
    assert 'data-plot="traffic-profile"' in html and 'data-plot="traffic-gain"' in html
    assert "best static setting: s4" in html
    md = subprocess.run([*base, "-f", "markdown"], capture_output=True, text=True, check=False)
    assert md.returncode == 0 and "\n## Traffic profile\n" in md.stdout and "- answer: deploy " in md.stdout
    refused = subprocess.run([*base, "-f", "json"], capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and "--traffic with --format json" in refused.stderr


def test_a_rate_a_setting_cannot_serve_leaves_it_out_and_says_why(seed_run: tuple[Path, str], tmp_path: Path) -> None:
    """The simulated spec settings cap their running requests (capacity 15-17), the baseline does not: a
    rate between their most and the baseline's most leaves them out, named, and answers with the baseline."""
    from specfrontier.perfmodel.cells import output_tokens_by_cell
    from specfrontier.traffic.figures import request_rate_curve

    path, run_id = seed_run
    store = Store(path, read_only=True)
    data = load_run(store, run_id).complete_evidence()
    tokens = output_tokens_by_cell(store.cells(run_id))
    top = {n: max(x for _, x in request_rate_curve(data, n, tokens)) for n in ("no-spec", "s3", "s4")}
    assert top["no-spec"] > max(top["s3"], top["s4"])
    rate = (top["no-spec"] + max(top["s3"], top["s4"])) / 2
    profile = tmp_path / "busy.csv"
    profile.write_text(f"rate_req_s,share\n1,0.5\n{rate},0.5\n")
    answer = traffic_answer(store, run_id, profile)
    assert [f.name for f in answer.settings] == ["no-spec"]
    assert len(answer.left_out) == 2 and all("is beyond what s" in line for line in answer.left_out)


def test_littles_law_by_hand_a_rate_halfway_between_two_levels_runs_half_at_each(
    seed_run: tuple[Path, str], tmp_path: Path
) -> None:
    """X(C) = aggregate / mean output tokens (read here from the stored requests); r = (X(1) + X(2)) / 2
    solves C = r x W(C) at C = 1.5: half the time at C = 1, half at C = 2 (the mean concurrency is kept)."""
    from specfrontier.store.cell_requests import request_heads

    path, run_id = seed_run
    store = Store(path, read_only=True)
    data = load_run(store, run_id)

    def mean_tokens(c: int) -> float:
        (row,) = [r for r in store.cells(run_id) if r.setting_id == "s4" and r.concurrency == c]
        tokens = [
            t
            for e, t in zip(
                request_heads(row.requests).errors, request_heads(row.requests).completion_tokens, strict=True
            )
            if e is None and t
        ]
        return sum(tokens) / len(tokens)

    x1, x2 = (_agg(data, "s4", c) / mean_tokens(c) for c in (1, 2))
    profile = tmp_path / "rate.yaml"
    profile.write_text(f"rate_req_s: {{{(x1 + x2) / 2}: 1}}\n")
    answer = traffic_answer(store, run_id, profile)
    s4 = next(f for f in answer.settings if f.name == "s4")
    assert {lv.concurrency: lv.share for lv in s4.levels} == pytest.approx({1: 0.5, 2: 0.5})
    assert s4.per_user_tok_s == pytest.approx(
        sum(0.5 * data.cell("s4", c).per_request_tok_s_p50.median for c in (1, 2))  # type: ignore[union-attr,operator]
    )


def test_a_one_range_schedule_is_the_static_setting_and_never_recommended(tmp_path: Path) -> None:
    settings = (SGLangSetting(name="no-spec"), SGLangSetting(name="s4", algorithm="EAGLE3", num_steps=4, eagle_topk=1))
    config = SimTuneConfig(engine=SimEngine(), settings=settings, concurrency=(1, 2, 4), repeats=1, rounds_per_cell=8)
    store, run_id = run_virtual(config, tmp_path / "small.db")
    answer = traffic_answer(store, run_id, _profile(tmp_path, {1: 0.5, 4: 0.5}))
    assert answer.best.name == "s4"
    assert answer.schedule.figures is None
    assert answer.schedule.note.startswith("no schedule: s4 is the best at every measured batch size")
    assert answer_line(answer) == "answer: deploy s4 (static)"


def test_a_lead_that_rests_on_predictions_within_their_error_names_no_setting(
    seed_run: tuple[Path, str], tmp_path: Path
) -> None:
    """Issue 38: where the model's error exceeds the difference between settings, the answer says so and
    names the levels to measure instead of a setting to deploy."""
    path, run_id = seed_run
    store = Store(path, read_only=True)
    answer = traffic_answer(store, run_id, _profile(tmp_path, {3: 0.5, 12: 0.5}))  # every level predicted

    def level(c: int, agg: float, predicted: bool) -> LevelFigure:
        return LevelFigure(c, 0.5, "x", agg, None, None, predicted, 0.1 if predicted else None)

    near = DayFigures("a", (level(1, 100.0, False), level(3, 110.0, True)), False)
    close = DayFigures("b", (level(1, 98.0, False), level(3, 105.0, True)), False)
    answer = dataclasses.replace(answer, schedule=ScheduleAnswer(None, "", "no schedule"))
    tied = dataclasses.replace(answer, settings=(near, close))
    line = answer_line(tied)
    assert line.startswith(f"answer: {NOT_SEPARATED} C = 3: a leads b by ")
    apart = DayFigures("b", (level(1, 50.0, False), level(3, 50.0, True)), False)
    assert answer_line(dataclasses.replace(answer, settings=(near, apart))).startswith("answer: deploy a")
    assert answer.model is not None and "stated error calibrated on its held-out errors" in answer.model


def _flat(name: str, *levels: tuple[int, float, str, float, bool]) -> DayFigures:
    """A setting's day figures by hand: (C, share, the setting run there, aggregate tok/s, predicted); a
    prediction's stated error is 0.1 %, so no model-error band overlaps and only the crossover rule speaks."""
    return DayFigures(
        name,
        tuple(LevelFigure(c, share, s, agg, None, None, p, 0.001 if p else None) for c, share, s, agg, p in levels),
        False,
    )


def test_a_lead_resting_on_a_level_where_the_measured_order_flips_names_no_setting(
    seed_run: tuple[Path, str], tmp_path: Path
) -> None:
    """Issue 38, item 5 (traffic): the seed run measured s3 ahead of no-spec at C = 16 (1316.9 against 868.2
    tok/s) and behind it at C = 32 (1322.0 against 1499.7). At C = 24 the model's order of the two is not a
    measurement: the lead is judged with s3 at the ratio measured at C = 32, and a lead resting on C = 24
    alone does not survive it."""
    path, run_id = seed_run
    store = Store(path, read_only=True)
    data = load_run(store, run_id).complete_evidence()
    ratio_32 = _agg(data, "s3", 32) / _agg(data, "no-spec", 32)
    assert ratio_32 < 1 < _agg(data, "s3", 16) / _agg(data, "no-spec", 16)

    answer = traffic_answer(store, run_id, _profile(tmp_path, {24: 1.0}))
    assert answer.best.name == "s3" and answer.settings[1].name == "no-spec"
    assert answer.unsettled == (Flip(24, 16, 32, "s3", "no-spec", pytest.approx(ratio_32)),)  # type: ignore[arg-type]

    leader = _flat("s3", (24, 1.0, "s3", 1300.0, True))
    second = _flat("no-spec", (24, 1.0, "no-spec", 1250.0, True))
    worst, flips = worst_case(data, leader, second)
    assert worst.aggregate_tok_s == pytest.approx(1250.0 * ratio_32)
    assert unsettled_lead(data, leader, second) == flips
    no_schedule = ScheduleAnswer(None, "", "no schedule")
    tied = dataclasses.replace(answer, settings=(leader, second), schedule=no_schedule, unsettled=flips)
    line = answer_line(tied)
    assert line.startswith(f"answer: {NOT_SEPARATED} C = 24: s3 leads no-spec by +50.0 aggregate tok/s")
    assert "C=24: the measured order of s3 and no-spec flips between C=16 and C=32" in line

    # 60 % of the time at C = 1, where s3 leads by 3.2x as measured: the lead holds whatever the order at 24.
    leader = _flat("s3", (1, 0.6, "s3", _agg(data, "s3", 1), False), (24, 0.4, "s3", 1300.0, True))
    second = _flat("no-spec", (1, 0.6, "no-spec", _agg(data, "no-spec", 1), False), (24, 0.4, "no-spec", 1250.0, True))
    assert unsettled_lead(data, leader, second) == ()
    assert worst_case(data, leader, second)[0].objective > second.objective
    kept = dataclasses.replace(answer, settings=(leader, second), schedule=no_schedule, unsettled=())
    assert answer_line(kept) == "answer: deploy s3 (static)"


def test_a_schedule_gain_resting_on_where_its_entries_order_flips_is_not_recommended(
    seed_run: tuple[Path, str], tmp_path: Path
) -> None:
    """The seed schedule runs s3 from batch 8 to 31 and s4 below; s4 and s3 are within 0.2 % at C = 16 and s3
    leads by 10 % at C = 32. A profile at C = 1 and 24 gains only at 24, where the schedule runs s3 against
    the static s4: not a gain the cells measure."""
    path, run_id = seed_run
    store = Store(path, read_only=True)
    data = load_run(store, run_id).complete_evidence()
    answer = traffic_answer(store, run_id, _profile(tmp_path, {1: 0.9, 24: 0.1}))
    assert answer.best.name == "s4"
    ratio_16 = _agg(data, "s3", 16) / _agg(data, "s4", 16)
    assert ratio_16 < 1 < _agg(data, "s3", 32) / _agg(data, "s4", 32)
    assert answer.schedule.unsettled == (Flip(24, 16, 32, "s3", "s4", pytest.approx(ratio_16)),)  # type: ignore[arg-type]

    s4_1 = _agg(data, "s4", 1)
    schedule = _flat("schedule", (1, 0.5, "s4", s4_1, False), (24, 0.5, "s3", 1330.0, True))
    static = _flat("s4", (1, 0.5, "s4", s4_1, False), (24, 0.5, "s4", 1260.0, True))
    flips = unsettled_lead(data, schedule, static)
    assert [f.concurrency for f in flips] == [24]
    gained = dataclasses.replace(
        answer,
        settings=(static,),
        schedule=ScheduleAnswer(schedule, "batch 1-7: s4, batch 8-31: s3", "predicted", 0.0, flips),
        unsettled=(),
    )
    line = answer_line(gained)
    assert line.startswith("answer: deploy s4 (static); the schedule's gain (+35.0 aggregate tok/s")
    assert line.endswith("which no cell measures: measure C = 24")
    settled = dataclasses.replace(gained, schedule=dataclasses.replace(gained.schedule, unsettled=()))
    assert answer_line(settled).startswith("answer: deploy the per-batch-size schedule")
