"""Cycle time T(B, s): one draft + verify iteration over B running requests (theory.md 2.1, 6.1).

The full cycle, as the simulator states it for a known deployment (s = draft depth, k = topk,
D = verified tokens per request, n = B * D verified tokens per cycle):

    T = base + request * B + expert * Ncov(n) + verify_token * n + compute_token * max(0, n - knee)
        [+ spec_overhead + s * (draft_step + draft_token * B * k)   with speculation on]

- Ncov(n) = E * (1 - (1 - k_e/E)^n) is the MoESD expected number of distinct experts the n verified
  tokens touch per layer under uniform routing (E experts, k_e per token): MoE verification reads the
  weights of the experts it touches, so its cost follows coverage, not tokens (arXiv 2505.19645).
- max(0, n - knee) is the roofline hinge: verification is memory-bound (nearly free per token) until n
  reaches the ridge, then compute-bound.

The fitted model cannot identify every term from a few cells, so it fits one of these linear FORMS,
each the full cycle with some terms left out (and a drafter family's own draft costs):

    dense:        verify_token * n
    moe:          ce * Ncov(n) / E + verify_token * n     E folded into ce, rho = k_e/E known or on a grid
    roofline:     compute_token * max(0, n - n0)          ridge n0 on a grid
    moe-roofline: ce * Ncov(n) / E + compute_token * max(0, n - n0)   rho known (model card), ridge on a grid
    kernel-switch: matvec_token * n * [n < L] + matmul_token * n * [n >= L]   switch L on a grid

Trees make moe-roofline necessary: a tree verifies D tokens per request (up to 64 and more), so at a small
batch the verified tokens already touch many more experts than a chain's (the MoE term), and at a large
batch they pass the ridge (the roofline term); a chain space rarely shows both at once.

Small forwards make the kernel-switch form necessary: engines multiply a forward of few rows with a
matrix-vector kernel whose cost grows with every row, and switch to a tiled matrix-matrix kernel above a
row count L (MLX: `get_qmv_batch_limit` in mlx/backend/metal/quantized.cpp returns 6-32 by GPU and matrix
size; ggml's Metal and CUDA back ends have their own limits). At the switch the cost per verified token
drops, so the cycle grows steeply up to L verified tokens, then slowly: MTPLX's MTP depth 3 on an M3 Ultra
(PR #338) has its cycle grow 28 and 46 ms from 4 to 8 and 16 verified tokens, then 11 ms from 16 to 32, no
roofline or expert coverage bends that way.

`request_terms`, `draft_terms` and `verify_terms` are the columns: `cycle_time_ms` weighs them with a
profile's known costs, the fitted model lays them out as its design row and fits the weights.
"""

from __future__ import annotations

from typing import Protocol

CYCLE_FORMS = ("dense", "moe", "roofline", "moe-roofline", "kernel-switch")
"""The linear cycle-time forms, simplest first (the fitted model prefers the simpler one on a tie)."""
VERIFY_TERM_NAMES: dict[str, tuple[str, ...]] = {
    "dense": ("verify_token_ms",),
    "moe": ("expert_coverage_ms", "verify_token_ms"),
    "roofline": ("compute_token_ms",),
    "moe-roofline": ("expert_coverage_ms", "compute_token_ms"),
    "kernel-switch": ("matvec_token_ms", "matmul_token_ms"),
}
"""Per form, the names of the coefficients of `verify_terms`' columns, in order."""


class CycleCosts(Protocol):
    """The per-term costs of the full cycle in ms (a simulator profile's `cycle` section has them)."""

    @property
    def base_ms(self) -> float: ...
    @property
    def request_ms(self) -> float: ...
    @property
    def spec_overhead_ms(self) -> float: ...
    @property
    def draft_step_ms(self) -> float: ...
    @property
    def draft_token_ms(self) -> float: ...
    @property
    def expert_ms(self) -> float: ...
    @property
    def verify_token_ms(self) -> float: ...
    @property
    def compute_knee_tokens(self) -> float: ...
    @property
    def compute_token_ms(self) -> float: ...


def request_terms(batch: float) -> list[float]:
    """[1, B]: the columns of the fixed cost and the per-running-request cost (`base_ms`, `request_ms`)."""
    return [1.0, batch]


def speculation_terms(batch: float) -> list[float]:
    """[1, B]: the columns of what speculation costs per cycle whatever its depth (`spec_overhead_ms` and a
    per-running-request share): the draft model's extend pass over the accepted tokens, building and
    sampling the draft tree, the accept bookkeeping. Public EAGLE-3 tables on an MoE target (AngelSlim #163,
    SpecForge #339: Qwen3-30B-A3B on H100s) show it: a 3-step speculative cycle at one request cost 9.6-12 ms
    where the plain decode step cost 4.5 ms, far more than 3 draft steps of a one-layer head."""
    return [1.0, batch]


def draft_terms(steps: int, batch: float, topk: int) -> list[float]:
    """[s, s * B * k]: the columns of the draft forwards' costs (`draft_step_ms`, `draft_token_ms`): s draft
    steps, each drafting k tokens for each of the B running requests."""
    return [float(steps), steps * batch * topk]


def verified_tokens(batch: float, draft_tokens: int) -> float:
    """n = B * D: tokens one verify forward processes for B running requests."""
    return batch * draft_tokens


def routing_ratio(experts: int, experts_per_token: int) -> float | None:
    """rho = k_e / E of an MoE target, or None for a dense one (every token reaches every expert)."""
    return experts_per_token / experts if experts_per_token < experts else None


def expert_coverage_fraction(tokens: float, rho: float) -> float:
    """Ncov(n) / E = 1 - (1 - rho)^n: the share of experts `tokens` tokens touch (MoESD, uniform routing)."""
    return float(1.0 - (1.0 - rho) ** tokens)


def expert_coverage(tokens: float, experts: int, experts_per_token: int) -> float:
    """Ncov(n) = E * (1 - (1 - k_e/E)^n), distinct experts touched per layer; 0 for no tokens, and the
    constant E for a dense model (k_e == E), which a fit absorbs into the fixed cost."""
    if tokens <= 0:
        return 0.0
    if experts_per_token >= experts:
        return float(experts)
    return float(experts * expert_coverage_fraction(tokens, experts_per_token / experts))


def compute_bound_tokens(tokens: float, ridge_tokens: float) -> float:
    """max(0, n - n0): verified tokens past the roofline ridge, the ones that cost compute time."""
    return max(0.0, tokens - ridge_tokens)


def kernel_regime_tokens(tokens: float, switch_tokens: float) -> list[float]:
    """[n, 0] below the switch L (a matrix-vector kernel), [0, n] at or above it (a tiled matrix-matrix one):
    the verified tokens each kernel regime processes."""
    return [tokens, 0.0] if tokens < switch_tokens else [0.0, tokens]


def verify_terms(form: str, shape: float | None, tokens: float, rho: float | None = None) -> list[float]:
    """The verify columns of a linear form at n = `tokens` (shape: rho for moe, the ridge for roofline and
    moe-roofline, the switch for kernel-switch; `rho`: the routing ratio moe-roofline needs)."""
    if form == "dense":
        return [tokens]
    if form == "moe":
        assert shape is not None
        return [expert_coverage_fraction(tokens, shape), tokens]
    if form == "roofline":
        assert shape is not None
        return [compute_bound_tokens(tokens, shape)]
    if form == "moe-roofline":
        assert shape is not None and rho is not None
        return [expert_coverage_fraction(tokens, rho), compute_bound_tokens(tokens, shape)]
    if form == "kernel-switch":
        assert shape is not None
        return kernel_regime_tokens(tokens, shape)
    raise ValueError(f"unknown cycle form {form!r}")


def cycle_time_ms(
    costs: CycleCosts,
    batch: int,
    speculative: bool,
    steps: int,
    topk: int,
    draft_tokens: int,
    experts: int,
    experts_per_token: int,
) -> float:
    """The full T(B, s) in ms for known per-term costs (0 for an empty batch)."""
    if batch <= 0:
        return 0.0
    verified = verified_tokens(batch, draft_tokens)
    fixed, per_request = request_terms(batch)
    t = costs.base_ms * fixed + costs.request_ms * per_request
    t += costs.expert_ms * expert_coverage(verified, experts, experts_per_token)
    t += costs.verify_token_ms * verified
    t += costs.compute_token_ms * compute_bound_tokens(verified, costs.compute_knee_tokens)
    if speculative:
        draft_steps, drafted = draft_terms(steps, batch, topk)
        t += costs.spec_overhead_ms
        t += costs.draft_step_ms * draft_steps + costs.draft_token_ms * drafted
    return t


__all__ = [
    "CYCLE_FORMS",
    "VERIFY_TERM_NAMES",
    "CycleCosts",
    "compute_bound_tokens",
    "cycle_time_ms",
    "draft_terms",
    "expert_coverage",
    "expert_coverage_fraction",
    "kernel_regime_tokens",
    "request_terms",
    "routing_ratio",
    "speculation_terms",
    "verified_tokens",
    "verify_terms",
]
