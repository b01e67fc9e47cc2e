"""A small bounded Levenberg-Marquardt least-squares solver (numpy only).

The profile fits have under ten parameters and a cheap, smooth residual (the steady-state surrogate),
so a forward-difference Jacobian and a textbook damping schedule are enough; this keeps an optimiser
library out of the runtime dependencies. Bounds are enforced by a logistic change of variables,
`p = lo + (hi - lo) * sigmoid(z)`, so every trial point is feasible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Vector = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class FitResult:
    """Best parameters found, their residuals' sum of squares, and the iterations used."""

    params: Vector
    cost: float
    iterations: int


def _to_params(z: Vector, lo: Vector, hi: Vector) -> Vector:
    # tanh form of the logistic: no overflow for large |z|.
    return lo + (hi - lo) * 0.5 * (1.0 + np.tanh(0.5 * z))


def _to_z(p: Vector, lo: Vector, hi: Vector) -> Vector:
    frac = np.clip((p - lo) / (hi - lo), 1e-6, 1.0 - 1e-6)
    return np.log(frac / (1.0 - frac))


def least_squares(
    residuals: Callable[[Vector], Vector],
    start: Sequence[float],
    lower: Sequence[float],
    upper: Sequence[float],
    *,
    max_iterations: int = 200,
    tolerance: float = 1e-12,
) -> FitResult:
    """Minimise sum(residuals(p)^2) for lower <= p <= upper, starting at `start`."""
    lo = np.asarray(lower, dtype=np.float64)
    hi = np.asarray(upper, dtype=np.float64)
    if np.any(hi <= lo):
        raise ValueError("least_squares: every upper bound must exceed its lower bound")
    z = _to_z(np.asarray(start, dtype=np.float64), lo, hi)
    r = residuals(_to_params(z, lo, hi))
    cost = float(r @ r)
    damping = 1e-3
    iterations = 0
    for iterations in range(1, max_iterations + 1):  # noqa: B007 - the count is returned
        jac = np.empty((r.size, z.size))
        for i in range(z.size):
            step = 1e-6 * max(1.0, abs(z[i]))
            trial = z.copy()
            trial[i] += step
            jac[:, i] = (residuals(_to_params(trial, lo, hi)) - r) / step
        grad = jac.T @ r
        normal = jac.T @ jac
        improved = converged = False
        while damping < 1e12:
            lhs = normal + damping * np.diag(np.diag(normal) + 1e-12)
            try:
                delta = np.linalg.solve(lhs, -grad)
            except np.linalg.LinAlgError:
                damping *= 10.0
                continue
            z_new = z + delta
            r_new = residuals(_to_params(z_new, lo, hi))
            cost_new = float(r_new @ r_new)
            if np.isfinite(cost_new) and cost_new < cost:
                converged = cost - cost_new <= tolerance * max(1.0, cost)
                z, r, cost = z_new, r_new, cost_new
                damping = max(damping / 3.0, 1e-9)
                improved = True
                break
            damping *= 4.0
        if not improved or converged:
            break
    return FitResult(params=_to_params(z, lo, hi), cost=cost, iterations=iterations)


__all__ = ["FitResult", "least_squares"]
