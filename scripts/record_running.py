"""Record a server's running-request gauge as Prometheus `query_range` JSON, without a Prometheus server.

Why: `specfrontier recommend --traffic FILE` reads the JSON that Prometheus's `/api/v1/query_range` returns
for `vllm:num_requests_running` (or `sglang:num_running_reqs`). Where no Prometheus server runs (this
project's CPU machines have none), this script scrapes the server's `/metrics` itself every `--every`
seconds and writes the same shape: `{"status": "success", "data": {"resultType": "matrix", "result":
[{"metric": {...labels}, "values": [[unix_ts, "value"], ...]}]}}`. It stops on SIGTERM/SIGINT or after
`--duration` seconds, and writes the file whole when it stops.

    python scripts/record_running.py --url http://127.0.0.1:8000 --metric vllm:num_requests_running \
        --every 0.5 --output running.json
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import time
import urllib.request
from pathlib import Path
from types import FrameType

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(url: str, metric: str) -> dict[tuple[tuple[str, str], ...], str]:
    """The gauge's value per label set, from one scrape of the Prometheus text format."""
    with urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=5) as resp:  # noqa: S310 (http only)
        text = resp.read().decode()
    out: dict[tuple[tuple[str, str], ...], str] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group("name") == metric:
            labels = tuple(sorted(_LABEL.findall(match.group("labels") or "")))
            out[labels] = match.group("value")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--metric", default="vllm:num_requests_running")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between scrapes")
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    stop = {"now": False}

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    series: dict[tuple[tuple[str, str], ...], list[list[float | str]]] = {}
    end = time.monotonic() + args.duration
    next_at = time.monotonic()
    while not stop["now"] and time.monotonic() < end:
        now = time.time()
        try:
            values = scrape(args.url, args.metric)
        except OSError:
            values = {}  # a missed scrape leaves a gap, as a Prometheus server's would
        for labels, value in values.items():
            series.setdefault(labels, []).append([round(now, 3), value])
        next_at += args.every
        time.sleep(max(0.0, next_at - time.monotonic()))
    result = [
        {"metric": {"__name__": args.metric, **dict(labels)}, "values": values} for labels, values in series.items()
    ]
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    tmp = args.output.with_suffix(args.output.suffix + ".tmp")
    tmp.write_text(json.dumps(body) + "\n")
    tmp.replace(args.output)


if __name__ == "__main__":
    main()
