"""Error rate of the sequential rule (`analysis.sequential`) against the full 3-repeat rule, by simulation.

Two settings whose repeats are normal around their true speeds (relative noise sigma): how often the rule
stops after 2 repeats with a win, how often the 3-repeat rule calls a win, and how often the pair stops as
a tie. With equal speeds (delta = 0) every win is a false one. Run: python benchmarks/sequential_rule.py
"""

from __future__ import annotations

import numpy as np

N = 400_000
MARGIN = 0.01  # the report's 1% (metrics.stats.TIE_RELATIVE)


def rates(rng: np.random.Generator, sigma: float, delta: float = 0.0) -> tuple[float, float, float]:
    """(stopped as a win at 2 repeats, 3-repeat rule win, stopped as a tie at 2) over N simulated pairs."""
    a = 1 + delta + sigma * rng.standard_normal((N, 3))
    b = 1 + sigma * rng.standard_normal((N, 3))
    a2, b2 = a[:, :2], b[:, :2]
    la, ha, lb, hb = a2.min(1), a2.max(1), b2.min(1), b2.max(1)
    apart_a, apart_b = la > hb, lb > ha
    gap = np.where(apart_a, la - hb, np.where(apart_b, lb - ha, -1.0))
    width = np.maximum(ha - la, hb - lb)
    ma, mb = a2.mean(1), b2.mean(1)
    margin = np.where(apart_a, ma / mb - 1, mb / ma - 1)
    stopped_win = (gap > width) & (margin > MARGIN)
    m3a, m3b = np.median(a, 1), np.median(b, 1)
    full = ((a.min(1) > b.max(1)) | (b.min(1) > a.max(1))) & (np.abs(m3a / m3b - 1) > MARGIN)
    return float(stopped_win.mean()), float(full.mean()), float((~(apart_a | apart_b)).mean())


def main() -> None:
    rng = np.random.default_rng(1)
    print("sigma  delta  stopped-win@2  win@3(full rule)  stopped-tie@2")
    for sigma, delta in ((0.03, 0.0), (0.05, 0.0), (0.1, 0.0), (0.03, 0.05), (0.05, 0.1), (0.03, 0.1)):
        win2, win3, tie2 = rates(rng, sigma, delta)
        print(f"{sigma:5.2f}  {delta:5.2f}  {win2:13.3f}  {win3:16.3f}  {tie2:13.3f}")


if __name__ == "__main__":
    main()
