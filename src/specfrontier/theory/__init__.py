"""The performance theory of speculative serving: how fast a server decodes, as formulas.

"Model" elsewhere in specfrontier never means the LLM: `perfmodel/` is the performance model FITTED to
measured cells and `sim/` is a discrete-event SIMULATOR of a server. Both rest on the same theory
(../shared/reference/theory.md sections 1, 2 and 6), and it is written here once, so the simulator's
predictions and the fitted model's cannot drift apart through two copies of one formula:

- `capacity`: the running-request capacity law `MRR(D) = floor(M / (S0 + D))` of hybrid-state engines,
  solving it exactly from read-back capacities, and the user's cap;
- `cycle`: the draft + verify cycle time T(B, s), its MoE expert-coverage term (MoESD), the roofline
  hinge, and the linear forms (dense, moe, roofline, moe-roofline, kernel-switch) the fitted model chooses between;
- `acceptance`: the acceptance length tau (tokens per cycle) from per-depth rates, and SGLang's draft
  tree (topk beam over num_steps levels, the num_draft_tokens - 1 best candidates verified) under the
  rank-probability model: P(accepted length >= j) per depth, which the model sums and the simulator draws;
- `throughput`: the running batch `B = min(C, MRR)` and the per-request decode rate `v = 1000 * tau / T`.

Everything here is a pure function of numbers: no profiles, cells, fitting or I/O, and no import of
`sim` or `model` (they import this package, never the other way round).
"""
