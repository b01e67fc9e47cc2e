"""Tiny builders shared by the unit tests (importable because pytest puts tests/ on the path)."""

from __future__ import annotations

from specfrontier.records import RequestRecord

MS = 1_000_000  # ns per ms


def record_ms(
    send_ms: int, first_ms: int | None, end_ms: int, tokens: int | None, error: str | None = None
) -> RequestRecord:
    """A request record from millisecond times (first token None = no text arrived)."""
    return RequestRecord(
        prompt_id="p",
        send_ns=send_ms * MS,
        end_ns=end_ms * MS,
        first_token_ns=None if first_ms is None else first_ms * MS,
        completion_tokens=tokens,
        error=error,
    )


def chmod_binds() -> bool:
    """Whether chmod 0444 stops this process writing a file: False for root (or any process with
    CAP_DAC_OVERRIDE), where permission cases must use SQLite's own read-only switches instead."""
    import shutil
    import tempfile
    from pathlib import Path

    probe = Path(tempfile.mkdtemp()) / "probe"
    probe.write_bytes(b"")
    probe.chmod(0o444)
    try:
        with probe.open("wb"):
            return False
    except PermissionError:
        return True
    finally:
        shutil.rmtree(probe.parent)
