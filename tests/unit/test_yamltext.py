"""YAML with bounded aliases, and values quoted without being built whole (issue 39, item 2)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specfrontier.errors import ConfigError, shown_value
from specfrontier.yamltext import ALIAS_SLACK, load_yaml


def _nested(levels: int) -> list[object]:
    """9**(levels + 1) strings in a few objects: each level is nine references to the one below."""
    value: list[object] = ["lol"] * 9
    for _ in range(levels):
        value = [value] * 9
    return value


def test_a_value_is_quoted_without_being_built_whole() -> None:
    start = time.perf_counter()
    shown = shown_value(_nested(12))  # 2.5e12 strings written out
    assert time.perf_counter() - start < 0.5
    assert shown.startswith("[[[[[[[[[[[[['lol', 'lol', ") and shown.endswith("… (a list of 9 entries)")
    assert len(shown) < 120


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("y" * 100, "'" + "y" * 79 + "… (100 characters)"),
        ("short", "'short'"),
        ((1,), "(1,)"),
        ({"a": 1}, "{'a': 1}"),
        (10**5000, "<an integer of 16610 bits>"),
        (None, "None"),
    ],
    ids=["long-string", "string", "tuple", "mapping", "huge-int", "none"],
)
def test_shown_values_keep_their_old_form(value: object, shown: str) -> None:
    assert shown_value(value) == shown


def test_a_self_referencing_value_is_quoted_cut() -> None:
    loop: list[object] = []
    loop.append(loop)
    assert shown_value(loop).endswith("… (a list of 1 entry)")


def test_an_alias_bomb_is_refused_before_it_is_built(tmp_path: Path) -> None:
    parts = ['&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    parts += [f"&{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    text = "notes: [" + ", ".join(parts) + "]\n"
    with pytest.raises(ConfigError) as exc:
        load_yaml(text, tmp_path / "c.yaml")
    message = str(exc.value)
    assert message.startswith(f"{tmp_path / 'c.yaml'}: YAML aliases expand 21 nodes written into 490329057 ")
    assert "fix: write the repeated values out" in message


def test_anchors_used_as_shorthands_and_recursion_are_read(tmp_path: Path) -> None:
    shared = "args: &a [--x, --y]\nsettings:\n" + "".join(f"  - {{name: s{i}, extra_args: *a}}\n" for i in range(500))
    data = load_yaml(shared, tmp_path / "c.yaml")
    assert len(data["settings"]) == 500 and data["settings"][499]["extra_args"] == ["--x", "--y"]
    loop = load_yaml("a: &a [1, *a]\n", tmp_path / "c.yaml")
    assert loop["a"][1] is loop["a"]
    assert load_yaml("", tmp_path / "c.yaml") is None


def test_the_bound_has_slack_for_a_small_document(tmp_path: Path) -> None:
    """Aliases that expand a tiny document to just under the slack are read; just over it, refused."""
    under = "x: &x [" + ", ".join(["1"] * 99) + "]\ny: [" + ", ".join(["*x"] * 99) + "]\n"  # ~9,900 nodes
    assert len(load_yaml(under, tmp_path / "c.yaml")["y"]) == 99
    over = "x: &x [" + ", ".join(["1"] * 99) + "]\ny: [" + ", ".join(["*x"] * 110) + "]\n"
    with pytest.raises(ConfigError, match="YAML aliases expand"):
        load_yaml(over, tmp_path / "c.yaml")
    assert ALIAS_SLACK == 10_000


def test_a_syntax_error_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_yaml("a: [1, 2\nb: 3\n", tmp_path / "c.yaml")
    assert "\n" not in str(exc.value) and "not valid YAML" in str(exc.value)
