"""A stored run built to stress the HTML report: two workloads, three settings, hostile model text.

Shared by the unit tests of report/html.py and the Chromium tests (importable: tests/ is on the path).
"""

from __future__ import annotations

from pathlib import Path

from builders import MS
from specfrontier.records import RequestRecord, SpecCounters
from specfrontier.store import Store

SCRIPT_TEXT = '<script>document.title="PWNED";window.pwned=1</script><img src=x onerror="window.pwned=2">'
"""Model output that would run script, or fetch an image, if the report did not escape it."""
HOSTILE_SETTING = "ngram<b>bold</b>"
WORKLOADS = ("builtin:cpu-mix|t=0.0|max=32|eos=natural", "chat.jsonl|t=0.7|max=32|eos=natural")
SETTINGS = {"baseline": 1.0, HOSTILE_SETTING: 1.6, "draft-4": 2.2}
"""setting -> speed-up at C=1; the gain shrinks with C (and more so for the bigger draft)."""
LEVELS = (1, 2, 4)


ROUNDS = 6
"""Rounds of C requests per cell, each request replaced the instant it ends (a closed loop): the first
round is the ramp, the other five give the cell a steady state of five request lifetimes."""


def _requests(c: int, per_user_tok_s: float, repeat: int) -> list[RequestRecord]:
    """ROUNDS x C requests back to back; each decodes 32 tokens at `per_user_tok_s`."""
    out = []
    ttft = 40 + 10 * c
    length = ttft + round(31 / per_user_tok_s * 1000)
    for k in range(ROUNDS * c):
        send = (k // c) * length + repeat * 3
        first = send + ttft
        end = send + length
        out.append(
            RequestRecord(
                prompt_id=f"p{k}",
                send_ns=send * MS,
                end_ns=end * MS,
                first_token_ns=first * MS,
                chunk_ns=(first * MS, end * MS),
                completion_tokens=32,
                output_text=SCRIPT_TEXT if k == 0 else "plain text",
            )
        )
    return out


def build_run(path: Path) -> tuple[Store, str]:
    """The run, stored at `path`; returns the open store and the run id."""
    store = Store(path)
    env = {"engine_version": "b1 <script>env</script>", "cpu": "TestCPU", "cpu_count": 2, "simulated": False}
    run_id = store.create_run(engine="llamacpp", config={}, environment=env)
    for pos, (name, gain) in enumerate(SETTINGS.items()):
        store.add_setting(run_id, setting_id=name, position=pos, name=name, params={}, speculative=pos > 0)
        store.update_setting(
            run_id,
            name,
            status="done",
            command=("llama-server", "-m", "m.gguf", "--alias", name),
            capacity=4,
            capacity_source="/props total_slots",
            startup_s=1.0 + pos,
            first_ttft_ms=100.0 + pos,
            first_e2e_ms=500.0 + pos,
        )
        for wi, workload in enumerate(WORKLOADS):
            for c in LEVELS:
                speed = 40.0 * (1 + (gain - 1) / c**pos) * (1 - 0.1 * wi) / (1 + 0.05 * c)
                for repeat in range(3):
                    counters = SpecCounters(100, 60 - 20 * wi, 40, (30, 20)) if pos else None
                    store.record_cell(
                        run_id,
                        setting_id=name,
                        workload=workload,
                        concurrency=c,
                        repeat=repeat,
                        requests=_requests(c, speed * (1 + 0.01 * repeat), repeat),
                        counters=counters,
                        acceptance_source="metrics" if pos else None,
                    )
    store.add_setting(run_id, setting_id="broken", position=9, name="broken", params={}, speculative=True)
    store.update_setting(run_id, "broken", status="failed", error="server said <script>alert(1)</script>\nmore")
    store.set_run_status(run_id, "done")
    return store, run_id
