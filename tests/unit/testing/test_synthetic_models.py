"""Unit tests of the synthetic target/draft GGUF generator (no llama-server needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specfrontier.errors import ConfigError
from specfrontier.testing.synthetic_models import SyntheticPair, generate_pair, main

gguf = pytest.importorskip("gguf")

# Small models keep every test well under a second; the structure is the same as the defaults.
SMALL: dict[str, Any] = {"layers": 3, "embd": 64, "ff": 128}


def _reader(path: Path) -> Any:
    return gguf.GGUFReader(path)


def _tensors(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    return {t.name: np.array(t.data) for t in _reader(path).tensors}


def _field(path: Path, key: str) -> Any:
    field = _reader(path).get_field(key)
    assert field is not None, key
    return field.contents()


def test_default_names_and_shared_draft(tmp_path: Path) -> None:
    a = generate_pair(tmp_path, alpha=0.05)
    b = generate_pair(tmp_path, alpha=0.2)
    assert a == SyntheticPair(
        target=tmp_path / "synth-target-L12-d256-a0.05.gguf",
        draft=tmp_path / "synth-draft-L1-d256.gguf",
        alpha=0.05,
    )
    assert b.target.name == "synth-target-L12-d256-a0.2.gguf"
    assert b.draft == a.draft
    assert a.target.is_file() and a.draft.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [a.draft.name, a.target.name, b.target.name]
    )  # no temp files left behind


def test_non_default_parameters_are_in_the_names(tmp_path: Path) -> None:
    pair = generate_pair(tmp_path, alpha=0.0, draft_layers=2, logit_scale=4.0, seed=3, **SMALL)
    assert pair.target.name == "synth-target-L3-k2-d64-a0-ff128-ls4-s3.gguf"
    assert pair.draft.name == "synth-draft-L2-d64-ff128-ls4-s3.gguf"


def test_rerun_is_a_no_op(tmp_path: Path) -> None:
    pair = generate_pair(tmp_path, alpha=0.1, **SMALL)
    before = {p: p.stat().st_mtime_ns for p in (pair.target, pair.draft)}
    assert generate_pair(tmp_path, alpha=0.1, **SMALL) == pair
    assert {p: p.stat().st_mtime_ns for p in (pair.target, pair.draft)} == before


def test_foreign_file_with_the_same_name_is_regenerated(tmp_path: Path) -> None:
    pair = generate_pair(tmp_path, alpha=0.1, **SMALL)
    good = pair.draft.read_bytes()
    pair.draft.write_bytes(b"not a gguf file")
    generate_pair(tmp_path, alpha=0.1, **SMALL)
    assert pair.draft.read_bytes() == good


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    one = generate_pair(tmp_path / "one", alpha=0.05, **SMALL)
    two = generate_pair(tmp_path / "two", alpha=0.05, **SMALL)
    other = generate_pair(tmp_path / "other", alpha=0.05, seed=1, **SMALL)
    assert one.target.read_bytes() == two.target.read_bytes()
    assert one.draft.read_bytes() == two.draft.read_bytes()
    assert one.target.read_bytes() != other.target.read_bytes()


def test_metadata_and_draft_shares_the_target_weights(tmp_path: Path) -> None:
    pair = generate_pair(tmp_path, alpha=0.3, layers=4, draft_layers=2, embd=128, ff=256)
    assert _field(pair.target, "general.architecture") == "llama"
    assert _field(pair.target, "llama.block_count") == 4
    assert _field(pair.draft, "llama.block_count") == 2
    assert _field(pair.target, "llama.embedding_length") == 128
    assert _field(pair.target, "llama.attention.head_count") == 2  # head dim 64
    assert _field(pair.target, "tokenizer.ggml.model") == "gpt2"
    tokens = _field(pair.target, "tokenizer.ggml.tokens")
    assert len(tokens) == _field(pair.target, "llama.vocab_size") == len(set(tokens)) > 256
    assert _field(pair.draft, "tokenizer.ggml.tokens") == tokens

    target, draft = _tensors(pair.target), _tensors(pair.draft)
    assert sum(name.startswith("blk.3.") for name in target) == 9
    assert not any(name.startswith("blk.2.") for name in draft)
    assert target["blk.0.attn_q.weight"].dtype == np.float16
    assert target["blk.0.attn_norm.weight"].dtype == np.float32
    assert set(draft) <= set(target)
    for name, value in draft.items():  # blocks 0-1, embedding, output norm and head: identical
        np.testing.assert_array_equal(value, target[name], err_msg=name)


def test_alpha_scales_only_the_extra_blocks_residual_projections(tmp_path: Path) -> None:
    zero = _tensors(generate_pair(tmp_path, alpha=0.0, **SMALL).target)
    one = _tensors(generate_pair(tmp_path, alpha=1.0, **SMALL).target)
    for blk in (1, 2):
        for proj in ("attn_output", "ffn_down"):
            name = f"blk.{blk}.{proj}.weight"
            assert not zero[name].any(), name
            assert one[name].any(), name
        np.testing.assert_array_equal(zero[f"blk.{blk}.attn_q.weight"], one[f"blk.{blk}.attn_q.weight"])
    np.testing.assert_array_equal(zero["blk.0.ffn_down.weight"], one["blk.0.ffn_down.weight"])
    assert zero["blk.0.ffn_down.weight"].any()


def test_non_printable_and_special_tokens_have_zero_output_rows(tmp_path: Path) -> None:
    pair = generate_pair(tmp_path, alpha=0.0, **SMALL)
    out = _tensors(pair.target)["output.weight"].astype(np.float32)
    tokens = _field(pair.target, "tokenizer.ggml.tokens")
    assert out.shape == (len(tokens), SMALL["embd"])
    live = {i for i in range(len(tokens)) if out[i].any()}
    assert tokens.index("A") in live and tokens.index("Ġ") in live  # 'Ġ' is the byte-level space
    assert tokens.index("Ċ") not in live  # newline byte
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert tokens.index(special) not in live
    assert len(live) >= 95


def test_logit_scale_multiplies_the_output_matrix(tmp_path: Path) -> None:
    plain = _tensors(generate_pair(tmp_path, alpha=0.1, **SMALL).draft)["output.weight"]
    sharp = _tensors(generate_pair(tmp_path, alpha=0.1, logit_scale=4.0, **SMALL).draft)["output.weight"]
    np.testing.assert_allclose(sharp.astype(np.float32), 4 * plain.astype(np.float32), rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"alpha": 0.1, "layers": 1, "draft_layers": 1}, "layers"),
        ({"alpha": 0.1, "layers": 4, "draft_layers": 4}, "draft_layers"),
        ({"alpha": 0.1, "draft_layers": 0}, "draft_layers"),
        ({"alpha": 0.1, "embd": 100}, "embd"),
        ({"alpha": 0.1, "ff": 0}, "ff"),
        ({"alpha": 0.1, "logit_scale": 0.0}, "logit_scale"),
        ({"alpha": 0.1, "seed": -1}, "seed"),
    ],
)
def test_invalid_inputs_name_the_field(tmp_path: Path, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^synthetic model: {field} = .*: .*; fix: "):
        generate_pair(tmp_path, **kwargs)
    assert not any(tmp_path.iterdir())


def test_main_writes_pairs_and_prints_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(tmp_path), "--alpha", "0", "--alpha", "0.2", "--layers", "2", "--embd", "64", "--ff", "64"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["0", "0.2"]
    for line in lines:
        for path in line.split("\t")[1:]:
            assert Path(path).is_file()
    assert main([str(tmp_path), "--alpha", "-1"]) == 2
    assert "ConfigError: synthetic model: alpha" in capsys.readouterr().err
