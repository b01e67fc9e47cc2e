"""The simulator's own options are declared once for every face (`sim.serving.add_simulator_options`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from specfrontier.sim import serve, trtllm_serve

FACES: list[tuple[Callable[[], argparse.ArgumentParser], list[str], str]] = [
    (serve.build_parser, [], "--"),
    (trtllm_serve.build_parser, ["model"], "--sim_"),
]


@pytest.mark.parametrize(("build", "base", "prefix"), FACES)
def test_every_face_refuses_a_time_scale_of_zero_in_one_line(
    build: Callable[[], argparse.ArgumentParser], base: list[str], prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """trtllm-serve's face took `--sim_time_scale 0` (and a negative start-up delay) before the options were
    shared; both faces now refuse them as SGLang's did, with argparse's one error line and exit 2."""
    flag = f"{prefix}time{'-' if prefix == '--' else '_'}scale"
    with pytest.raises(SystemExit) as exc:
        build().parse_args([*base, flag, "0"])
    assert exc.value.code == 2
    assert "must be > 0, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(("build", "base", "prefix"), FACES)
def test_every_face_has_the_same_simulator_defaults(
    build: Callable[[], argparse.ArgumentParser], base: list[str], prefix: str
) -> None:
    args = vars(build().parse_args(base))
    dest = "" if prefix == "--" else "sim_"
    assert args[f"{dest}profile"] == "seed-qwen3.5-122b-a10b" and args[f"{dest}workload"] == "synthetic"
    assert args[f"{dest}time_scale"] == 1.0 and args[f"{dest}seed"] == 0 and args[f"{dest}startup_s"] == 0.2
    assert args[f"{dest}allow_remote"] is False
