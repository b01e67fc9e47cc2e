"""How `store_v4.db` and its reports were made: by specfrontier at commit bc4eb6b (store schema 4).

Run from a checkout of that commit, with this folder as the output:
`PYTHONPATH=<checkout>/src python tests/data/store_v4/make_store_v4.py tests/data/store_v4`, then, for
each run id printed, `specfrontier report RUN --store store_v4.db --format json > report-RUN.json` with
the same checkout, and for the hand-made run also with `--slo ttft_p90_ms=40,tpot_p99_ms=9.5` into
`slo-RUN.json`. tests/unit/store/test_store_migration.py checks that today's tool reports the same.

Two runs: a simulated sweep in virtual time (2 settings x C 1, 4 x 2 repeats), and a hand-made run
whose requests carry what the simulator's do not: output texts on a greedy workload (one setting
diverges from the baseline on two prompts), session-replay turns, errors, requests without chunk token
counts, and an open-loop cell.
"""

from __future__ import annotations

import sys
from pathlib import Path

from specfrontier.engines.sglang import SGLangSetting
from specfrontier.engines.sim import SimEngine, SimTuneConfig
from specfrontier.records import RequestRecord, RequestSpecStats, SpecCounters
from specfrontier.runs.sweep import register_settings
from specfrontier.runs.virtual_sweep import VirtualSweep
from specfrontier.store import Store

MS = 1_000_000


def _config() -> SimTuneConfig:
    return SimTuneConfig(
        engine=SimEngine(),
        settings=(
            SGLangSetting(name="no-spec"),
            SGLangSetting(name="steps3", algorithm="EAGLE3", num_steps=3, eagle_topk=1),
        ),
        concurrency=(1, 4),
        repeats=2,
        rounds_per_cell=2,
    )


def _request(prompt: str, start: int, tokens: int, text: str, *, error: str | None = None) -> RequestRecord:
    first = start + 30 * MS + (len(prompt) % 5) * MS
    chunks = tuple(first + k * (9 * MS + k * 1_357) for k in range(tokens))
    return RequestRecord(
        prompt_id=prompt,
        send_ns=start,
        end_ns=chunks[-1] + 2 * MS if chunks else start + 5 * MS,
        first_token_ns=first if error is None else None,
        chunk_ns=chunks if error is None else (),
        chunk_tokens=tuple(1 + k % 2 for k in range(tokens)) if tokens % 2 and error is None else None,
        prompt_tokens=20 + len(prompt),
        completion_tokens=tokens if error is None else None,
        spec=RequestSpecStats(tokens, tokens // 2, None if tokens % 3 else tokens // 3) if error is None else None,
        finish_reason="length" if error is None else None,
        output_text=text if error is None else "",
        error=error,
    )


def _texts(setting: str, prompt: str) -> str:
    base = f"Answer to {prompt}: the café serves 3 \u00d7 4 = 12 dishes."
    if setting == "steps3" and prompt in ("p1", "p2"):
        return base.replace("12", "13")
    return base


def handmade(store: Store) -> str:
    config = _config()
    run_id = store.create_run(engine="sim", config=config.model_dump(mode="json"), environment={"simulated": True})
    register_settings(store, run_id, config.all_settings())
    for setting in ("no-spec", "steps3"):
        for level in (1, 2):
            for repeat in range(2):
                requests = [
                    _request(f"p{i % 4}", i * 40 * MS, 12 + i % 5, _texts(setting, f"p{i % 4}"))
                    for i in range(8 * level)
                ]
                requests.append(_request("p3", 8 * level * 40 * MS, 0, "", error="HTTP 500: boom"))
                store.record_cell(
                    run_id,
                    setting_id=setting,
                    workload="chat@greedy",
                    concurrency=level,
                    repeat=repeat,
                    requests=requests,
                    counters=SpecCounters(90, 45, 30, (20, 15, 10)) if setting == "steps3" else None,
                    acceptance_source="handmade",
                )
        turns = [_request(f"s{i % 2}#t{i // 2 + 1:02d}", i * 60 * MS, 10 + i, f"turn {i}") for i in range(6)]
        store.record_cell(
            run_id,
            setting_id=setting,
            workload="agent@t=0.7",
            concurrency=2,
            repeat=0,
            requests=turns,
            counters=None,
            acceptance_source=None,
        )
        store.record_cell(
            run_id,
            setting_id=setting,
            workload="chat@greedy",
            concurrency=0,
            repeat=0,
            requests=[_request(f"p{i}", i * 250 * MS, 10, _texts(setting, f"p{i}")) for i in range(6)],
            counters=None,
            acceptance_source=None,
            request_rate=4.0,
            load={"sent": 6, "measured": 6, "measured_span_tok_s": 41.5},
        )
        store.update_setting(run_id, setting, status="done", capacity=8, startup_s=1.5)
    store.set_run_status(run_id, "done")
    return run_id


def main(folder: Path) -> None:
    store = Store(folder / "store_v4.db")
    sweep = VirtualSweep(_config())
    sweep.attach(store)
    simulated = sweep.new_run()
    sweep.run_sync(simulated)
    print(simulated)
    print(handmade(store))
    store.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
