"""`specfrontier --help` and `runs` start light: importing the command line loads none of the heavy
packages the commands use when they run (each command imports those inside its function)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("asyncio", "pydantic", "numpy", "scipy", "matplotlib", "aiohttp", "jinja2", "specfrontier.analysis")


def test_importing_the_cli_loads_no_heavy_package() -> None:
    code = f"import sys, specfrontier.cli; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_the_performance_model_imports_scipy_only_to_fit() -> None:
    # every `tune` imports the search, hence the model; scipy.optimize (~0.25 s) waits for a fit
    code = "import sys, specfrontier.perfmodel, specfrontier.search; print('scipy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
