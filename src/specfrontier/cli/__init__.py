"""The command line: `app` (Typer) and `main` (the console-script entry point), one module per command.

Importing this package registers every command on `app`, in the order `--help` lists them.
"""

# isort: off
from specfrontier.cli import tune as _tune  # noqa: F401  (registration, in --help order)
from specfrontier.cli import bench as _bench  # noqa: F401
from specfrontier.cli import runs as _runs  # noqa: F401
from specfrontier.cli import report as _report  # noqa: F401
from specfrontier.cli import workloads as _workloads  # noqa: F401
from specfrontier.cli import calibrate as _calibrate  # noqa: F401
from specfrontier.cli import schedule as _schedule  # noqa: F401
from specfrontier.cli import perfmodel as _perfmodel  # noqa: F401
from specfrontier.cli import recommend as _recommend  # noqa: F401

# isort: on
from specfrontier.cli.app import app, main

__all__ = ["app", "main"]
