"""builder.atomic with real processes killed (SIGKILL) mid-build and mid-swap: what they leave is
recognisably ours and the next run cleans it up, restoring a displaced bundle; nothing it cannot
prove it wrote is touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.atomic import OWNER_FILE, STAGE_MARK, replace_dir
from builder.bundle import build_bundle, bundle_refusal, verify_bundle
from builder.constants import REPO_ROOT
from builder.errors import BundleError

# Runs build_bundle in a child that SIGKILLs itself at a chosen point, like `kill -9` or the OOM killer.
CHILD = """
import os, signal, sys, time
from pathlib import Path
from builder.bundle import assemble, build_bundle

out, when = Path(sys.argv[1]), sys.argv[2]
if when == "copy":  # half way through writing the new bundle
    real_copy, calls = assemble.copy_file, []
    def copy_file(src, dst):
        calls.append(src)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        real_copy(src, dst)
    assemble.copy_file = copy_file
elif when == "swap":  # the old bundle moved aside, the new one not yet in place
    real_rename = os.rename
    def rename(src, dst):
        real_rename(src, dst)
        if Path(src) == out:
            os.kill(os.getpid(), signal.SIGKILL)
    os.rename = rename
elif when == "hang":  # a live run that is still writing
    real_copy = assemble.copy_file
    def copy_file(src, dst):
        Path(sys.argv[3]).touch()
        time.sleep(600)
    assemble.copy_file = copy_file
build_bundle(target="gb10", out=out)
"""


def _child(out: Path, when: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # this checkout's builder, whatever the cwd
    return subprocess.Popen([sys.executable, "-c", CHILD, str(out), when, *extra], stderr=subprocess.PIPE, text=True, env=env)


def _killed(out: Path, when: str) -> None:
    proc = _child(out, when)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err


def _hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_run_killed_mid_build_leaves_a_marked_stage_that_the_next_run_removes(tmp_path, capsys):
    out = tmp_path / "gb10"
    _killed(out, "copy")
    [left] = _hidden(tmp_path)
    assert left.startswith(f".gb10{STAGE_MARK}")
    owner = json.loads((tmp_path / left / OWNER_FILE).read_text())
    assert owner["dest"] == str(out) and owner["tool"] == "qfn-int8kv builder"
    assert not out.exists()

    build_bundle(target="gb10", out=out)
    assert verify_bundle(out).ok
    assert _hidden(tmp_path) == []
    assert f"removed {left}, left by a killed run" in capsys.readouterr().err


def test_a_run_killed_mid_swap_never_loses_the_previous_bundle(tmp_path):
    out = tmp_path / "gb10"
    build_bundle(target="gb10", out=out)
    previous = _snapshot(out)
    _killed(out, "swap")
    assert not out.exists()  # the kill landed between the two renames
    [left] = _hidden(tmp_path)
    assert _snapshot(tmp_path / left / "old") == previous  # the previous bundle, intact and marked

    # The next run puts it back before it does anything else: a failing run leaves it in place.
    with pytest.raises(RuntimeError), replace_dir(out, replaceable=bundle_refusal, what="bundle", error=BundleError):
        raise RuntimeError("this run fails too")
    assert _snapshot(out) == previous and _hidden(tmp_path) == []

    _killed(out, "swap")
    build_bundle(target="gb10", out=out)
    assert verify_bundle(out).ok and _hidden(tmp_path) == []


def test_the_stage_of_a_live_run_is_left_alone(tmp_path):
    out = tmp_path / "gb10"
    started = tmp_path / "started"
    proc = _child(out, "hang", str(started))
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        [theirs] = _hidden(tmp_path)
        build_bundle(target="gb10", out=out)  # a second run for the same folder, meanwhile
        assert verify_bundle(out).ok
        assert _hidden(tmp_path) == [theirs]
    finally:
        proc.kill()
        proc.wait()
    build_bundle(target="gb10", out=out)
    assert _hidden(tmp_path) == []


def test_folders_that_only_look_like_stages_are_never_removed(tmp_path):
    out = tmp_path / "gb10"
    no_owner = tmp_path / f".gb10{STAGE_MARK}user"
    (no_owner / "out").mkdir(parents=True)
    (no_owner / "out" / "mine.txt").write_text("mine")
    other_dest = tmp_path / f".gb10{STAGE_MARK}other"
    other_dest.mkdir()
    (other_dest / OWNER_FILE).write_text(json.dumps(
        {"tool": "qfn-int8kv builder", "dest": str(tmp_path / "elsewhere"), "host": os.uname().nodename, "pid": 1,
         "started": "2026-01-01T00:00:00Z"}))
    extra_entry = tmp_path / f".gb10{STAGE_MARK}extra"
    extra_entry.mkdir()
    (extra_entry / OWNER_FILE).write_text(json.dumps(
        {"tool": "qfn-int8kv builder", "dest": str(out), "host": os.uname().nodename, "pid": 1,
         "started": "2026-01-01T00:00:00Z"}))
    (extra_entry / "notes.txt").write_text("someone put this here")
    legacy = tmp_path / ".gb10.tmp-abc123"  # the old builder's name: nothing proves what it holds
    legacy.mkdir()
    (legacy / "x").write_text("x")
    before = _hidden(tmp_path)

    build_bundle(target="gb10", out=out)
    assert _hidden(tmp_path) == before
    assert (no_owner / "out" / "mine.txt").read_text() == "mine"
    assert (extra_entry / "notes.txt").exists() and (legacy / "x").exists()


def test_a_file_added_while_building_is_named_and_kept(tmp_path):
    """The destination is checked again at the swap: a file added during a long build stops it."""
    out = tmp_path / "gb10"
    build_bundle(target="gb10", out=out)
    with pytest.raises(BundleError, match="does not list: late.txt"), replace_dir(
        out, replaceable=bundle_refusal, what="bundle", error=BundleError
    ) as stage:
        (stage / "x").write_text("new")
        (out / "late.txt").write_text("added meanwhile")
    assert (out / "late.txt").read_text() == "added meanwhile"
    assert _hidden(tmp_path) == []
