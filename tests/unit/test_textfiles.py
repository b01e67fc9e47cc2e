"""The shared reader and writer of user files: one ConfigError line for every way a path can be wrong,
and an atomic write that never leaves its tmp file behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from specfrontier.errors import ConfigError
from specfrontier.textfiles import check_output_path, file_name_for, read_text_utf8, write_text_atomic

LATIN1 = "name,value\nbaseline,caf\xe9\n".encode("latin-1")
"""A file saved as Latin-1: the first non-UTF-8 byte (0xe9) is at offset 23, on line 2."""


def _one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_reads_utf8_and_drops_a_byte_order_mark(tmp_path: Path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("héllo\n", encoding="utf-8")
    assert read_text_utf8(plain, "--config") == "héllo\n"
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbfengine,setting\n")
    assert read_text_utf8(bom, "import: path") == "engine,setting\n"


def test_non_utf8_names_the_file_the_offset_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    path.write_bytes(LATIN1)
    with pytest.raises(ConfigError) as exc:
        read_text_utf8(path, "import: path")
    assert _one_line(exc) == (
        f"import: path = '{path}': not UTF-8 text (byte 0xe9 at offset 23, line 2); fix: save it as UTF-8"
    )


@pytest.mark.parametrize(
    ("directory", "reason", "fix"),
    [
        (False, "No such file or directory", "fix: pass an existing file"),
        (True, "Is a directory", "fix: pass a file, not a directory"),
    ],
)
def test_unreadable_paths_name_the_reason_and_the_fix(tmp_path: Path, directory: bool, reason: str, fix: str) -> None:
    path = tmp_path / "c.yaml"
    if directory:
        path.mkdir()
    with pytest.raises(ConfigError) as exc:
        read_text_utf8(path, "--config")
    assert _one_line(exc) == f"--config = '{path}': cannot read it ({reason}); {fix}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_says_how_to_make_it_readable(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\n")
    path.chmod(0)
    with pytest.raises(ConfigError, match=r"cannot read it \(Permission denied\); fix: make it readable"):
        read_text_utf8(path, "--config")


def test_the_callers_fix_applies_to_a_missing_file_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"fix: use builtin:cpu-mix$"):
        read_text_utf8(tmp_path / "p.jsonl", "--prompts", fix="use builtin:cpu-mix")
    with pytest.raises(ConfigError, match=r"fix: pass a file, not a directory$"):
        read_text_utf8(tmp_path, "--prompts", fix="use builtin:cpu-mix")


def test_output_path_checks(tmp_path: Path) -> None:
    assert check_output_path(tmp_path / "r.html") == tmp_path / "r.html"
    assert check_output_path(Path("relative.html")) == Path("relative.html")  # parent: the working directory
    with pytest.raises(ConfigError) as exc:
        check_output_path(tmp_path, "-o", example="report.md")
    assert _one_line(exc) == f"-o = '{tmp_path}': is a directory; fix: give a file name, e.g. {tmp_path}/report.md"
    missing = tmp_path / "missing" / "x.html"
    with pytest.raises(ConfigError) as exc:
        check_output_path(missing)
    assert _one_line(exc) == (
        f"-o = '{missing}': directory {missing.parent} does not exist; fix: create it or choose another path"
    )
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"file is not a directory; fix: choose another path"):
        check_output_path(tmp_path / "file" / "x.html")


def test_atomic_write_replaces_the_file_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")
    assert write_text_atomic(path, "new\n") == path
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_failed_write_removes_its_tmp_and_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()  # renaming a file over a directory fails after the tmp file was written
    with pytest.raises(ConfigError, match=r"-o = '.*out': cannot write it \(Is a directory\); fix: choose another"):
        write_text_atomic(target, "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_interrupted_write_removes_its_tmp_and_reraises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.html"
    path.write_text("old")

    def interrupted(self: Path, target: Path) -> Path:
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(path, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    assert path.read_text() == "old"


def test_something_named_like_the_old_tmp_file_is_left_alone(tmp_path: Path) -> None:
    """The temporary file has a fresh name: a directory or a file called NAME.tmp is the user's, not ours."""
    (tmp_path / "r.html.tmp").mkdir()
    (tmp_path / "r.json.tmp").write_text("mine")
    write_text_atomic(tmp_path / "r.html", "new")
    write_text_atomic(tmp_path / "r.json", "new")
    assert (tmp_path / "r.html.tmp").is_dir() and (tmp_path / "r.json.tmp").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.html.tmp", "r.json", "r.json.tmp"]


def test_a_replaced_file_keeps_its_mode_and_a_new_one_gets_the_umask(tmp_path: Path) -> None:
    kept = tmp_path / "kept.md"
    kept.write_text("old")
    kept.chmod(0o600)
    write_text_atomic(kept, "new")
    assert (kept.read_text(), stat.S_IMODE(kept.stat().st_mode)) == ("new", 0o600)
    umask = os.umask(0o022)
    try:
        fresh = write_text_atomic(tmp_path / "fresh.md", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644  # as open() would create it, not mkstemp's 0600


def test_a_dangling_symlink_is_written_through_to_its_target(tmp_path: Path) -> None:
    link = tmp_path / "latest.html"
    link.symlink_to(tmp_path / "runs" / "r1.html")
    with pytest.raises(ConfigError, match=r"directory .*runs does not exist"):
        check_output_path(link)  # the file written is the target: its folder must exist
    (tmp_path / "runs").mkdir()
    write_text_atomic(link, "page")
    assert link.is_symlink() and (tmp_path / "runs" / "r1.html").read_text() == "page"


def test_a_fifo_without_write_permission_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o444)
    if os.access(fifo, os.W_OK):
        pytest.skip("root writes every file")
    with pytest.raises(ConfigError, match=r"-o = '.*pipe': not writable; fix: choose another path"):
        check_output_path(fifo)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.parametrize(
    ("label", "kept"),
    [("steps2", True), ("eagle3:topk-4+d5", True), ("x" * 96, True), ("x" * 97, False), ("a/b", False), ("..", False)],
)
def test_file_names_for_labels_are_bounded_and_distinct(label: str, kept: bool) -> None:
    name = file_name_for(label, ".log")
    assert (name == label + ".log") is kept
    assert len(name.encode()) <= 120 and "/" not in name and not name.startswith(".")
    assert name != file_name_for(label + "y", ".log")


def test_a_label_of_thousands_of_characters_names_a_file_that_can_be_made(tmp_path: Path) -> None:
    names = {file_name_for("x" * n, ".log") for n in (260, 261, 5000)}
    assert len(names) == 3  # cut to the same prefix, told apart by the hash
    for name in names:
        (tmp_path / name).write_text("ok")  # no `File name too long`
