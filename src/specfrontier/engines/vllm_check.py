"""`python -m specfrontier.engines.vllm_check`: the last step of `scripts/install.sh --vllm`.

Proves, without starting a server (that takes a minute or two and is what the tests do), that the vLLM
environment the adapter will use is found, imports, names its speculative methods, and that the converted
model folder is there. Exit 0 and one line per fact, or exit 1 with the error and its fix.
"""

from __future__ import annotations

import sys

from specfrontier.engines.vllm import VllmAdapter, VllmEngine, default_settings
from specfrontier.errors import SpecFrontierError


def main() -> int:
    adapter = VllmAdapter(VllmEngine())
    try:
        adapter.prepare(default_settings())
    except SpecFrontierError as exc:
        print(f"vllm_check: {exc}", file=sys.stderr)
        return 1
    installed = adapter.installed
    assert installed is not None  # prepare() probed it
    print(f"vllm_check: vLLM {installed.version} at {adapter.python}")
    print(f"vllm_check: model {adapter.model}")
    print(f"vllm_check: speculative methods: {', '.join(installed.methods)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
