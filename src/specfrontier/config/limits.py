"""Bounds shared by the config (`tune`) and the command-line options of `bench`.

Why a module of their own: `tune` and `bench` drive the same load generator, so a value one refuses the
other must refuse too; with one constant per bound they cannot drift apart (before, `bench --concurrency
100000` passed while the config capped concurrency at 4096). Kept free of imports so that every config
module, and `bench`, can use them without an import cycle; the report reads the evidence rule's default
from here too (a run stored before the field existed has it unset).
"""

from __future__ import annotations

MAX_CONCURRENCY = 4096
"""Closed-loop client concurrency (and the open loop's in-flight cap): one stream each, so beyond this
the client, not the server, is what gets measured."""

MAX_RATE = 100000.0
"""Open-loop request rate, in requests per second."""

MAX_CLIENT_WORKERS = 256
"""Client processes per cell."""

MAX_SETTING_NAME = 64
"""Characters of a listed setting's name: it labels report rows, progress lines and the commands printed,
and a server log file is named after it (260 characters failed the launch with `File name too long`).
Names a search derives from a listed one (`-d5`, `-2`) may be a few characters longer."""

MAX_REQUEST_TIMEOUT_S = 7200.0
"""Per-request timeout (`request_timeout_s`, `bench --request-timeout`), in seconds: two hours is 65,536
output tokens (the `max_tokens` cap) at 9 tok/s. A timeout must be finite: `.inf` let a server that
answered 200 and then sent nothing hang the run for good."""

MAX_STARTUP_TIMEOUT_S = 21600.0
"""Start-up timeout of a launched server (`engine.startup_timeout_s`), in seconds: six hours covers the
slowest load we know of (a large TensorRT-LLM engine built on first start); finite for the same reason."""

DEFAULT_MAX_FAILED_SHARE = 0.01
"""The evidence rule's bound on failed requests (`max_failed_share`, docs/reliability.md): a cell whose
failed requests exceed this share of its requests (over its repeats) is not evidence. Why 1 %: a failed
request adds no tokens, so a share f of failures moves a cell's tok/s by about f, and 1 % stays well
inside the 3 % agreement the client is held to (benchmarks/client_fidelity.py) and the 10 % noise rule;
a half-failed cell (one prompt over the context length) is far outside it. A cell of fewer than 100
requests may therefore have no failed request at all."""

DEFAULT_MAX_SETTINGS = 256
"""Settings a config may list or its `space:` expand to unless it raises `max_settings`: a grid search
launches a server per setting, so 47,233 settings (a space accepted without a word, issue 39) were 47,233
launches and as many store transactions before the first result."""

MAX_SETTINGS = 100_000
"""Highest `max_settings` (and the most combinations a `space:` may declare)."""

DEFAULT_MAX_CLIENT_LAG_SHARE = 0.02
"""The evidence rule's bound on the client's lag (`max_client_lag_share`, docs/reliability.md): a cell whose
client's event-loop lag p99, in some repeat and worker, exceeds this share of its request lifetime (median
E2E, in wall time), or 5 ms where that is more, or whose client CPU exceeds 90 % of a core, could not keep
up and is not evidence. A lagging client sees each end late and sends the next request late, so the server
serves fewer than C, which the client's own in-flight count cannot show: measured
(benchmarks/client_lag.py), the shortfall was at most ~1.7 x lag p99 / lifetime, so 2 % keeps it within
~3.4 %, inside the 5 % the steady state allows."""

__all__ = [
    "DEFAULT_MAX_CLIENT_LAG_SHARE",
    "DEFAULT_MAX_FAILED_SHARE",
    "DEFAULT_MAX_SETTINGS",
    "MAX_CLIENT_WORKERS",
    "MAX_CONCURRENCY",
    "MAX_RATE",
    "MAX_REQUEST_TIMEOUT_S",
    "MAX_SETTINGS",
    "MAX_SETTING_NAME",
    "MAX_STARTUP_TIMEOUT_S",
]
