"""Read the plotted points of a matplotlib vector figure (SVG) back into numbers.

Some public results are published only as a vector chart (the vLLM blog post on DSpark adaptive
verification, Figure 3). A matplotlib SVG keeps every data point as a coordinate with 6 decimals, and its
axis ticks as coordinates labelled with their values, so the points can be read back exactly (to well
under 0.01 tok/s), not estimated from pixels. This script inverts the axis transform fitted through the
first and last labelled tick of each axis (`--xlog`/`--ylog` for a logarithmic axis) and prints, per data
series (an unfilled line clipped to the axes, named by its CSS colour variable, e.g. `var(--k3, ...)`),
its points in drawing order as JSON.

Run: `python benchmarks/public/svg_points.py fig3-pareto.svg --xlog` (how
`vllm_blog_dspark_dsv4pro_b300.json` was made; benchmarks/public/README.md names the figure's blob).
It reads the file given and nothing else; it is not part of the package.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

_TICK = re.compile(r'<g id="(xtick|ytick)_\d+">(.*?)<!-- (.*?) -->', re.S)
_TICK_AT = re.compile(r'<use xlink:href="#\w+" x="([-\d.]+)" y="([-\d.]+)"')
_SERIES = re.compile(
    r'<g id="line2d_\d+">\s*<path d="(M [^"]+)"[^>]*clip-path="url\(#\w+\)" style="fill: none; stroke: var\(--([\w-]+),'
)
_POINT = re.compile(r"([-\d.]+) ([-\d.]+)")


def _axis(ticks: list[tuple[float, float]], log: bool) -> tuple[float, float, float, float, bool]:
    """(value0, coord0, value1, coord1, log) through the first and last labelled tick."""
    if len(ticks) < 2:
        raise SystemExit("fewer than two labelled ticks on an axis: not a matplotlib SVG this script reads")
    (v0, c0), (v1, c1) = ticks[0], ticks[-1]
    return v0, c0, v1, c1, log


def _value(axis: tuple[float, float, float, float, bool], coord: float) -> float:
    v0, c0, v1, c1, log = axis
    if log:
        return math.exp(math.log(v0) + (coord - c0) * (math.log(v1) - math.log(v0)) / (c1 - c0))
    return v0 + (coord - c0) * (v1 - v0) / (c1 - c0)


def read_points(svg: str, *, xlog: bool, ylog: bool) -> dict[str, list[tuple[float, float]]]:
    """Series name -> its points (x, y) in data units, in drawing order."""
    xt: list[tuple[float, float]] = []
    yt: list[tuple[float, float]] = []
    for kind, body, label in _TICK.findall(svg):
        at = _TICK_AT.search(body)
        if at is None:
            continue
        x, y = float(at.group(1)), float(at.group(2))
        try:
            value = float(label.replace("\u2212", "-"))
        except ValueError:
            continue
        (xt if kind == "xtick" else yt).append((value, x if kind == "xtick" else y))
    ax, ay = _axis(xt, xlog), _axis(yt, ylog)
    out: dict[str, list[tuple[float, float]]] = {}
    for path, name in _SERIES.findall(svg):
        if name == "grid":  # grid lines share the series' drawing style
            continue
        points = [(float(a), float(b)) for a, b in _POINT.findall(path)]
        out[name] = [(_value(ax, a), _value(ay, b)) for a, b in points]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("svg", type=Path)
    parser.add_argument("--xlog", action="store_true", help="the x axis is logarithmic")
    parser.add_argument("--ylog", action="store_true", help="the y axis is logarithmic")
    args = parser.parse_args()
    points = read_points(args.svg.read_text(encoding="utf-8"), xlog=args.xlog, ylog=args.ylog)
    print(json.dumps({k: [[round(x, 4), round(y, 4)] for x, y in v] for k, v in points.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
