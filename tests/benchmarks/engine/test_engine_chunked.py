"""The chunked transport: the commands commands.json lists, what `prepare` refuses before writing anything,
the runner's limits as parameters (piece size, seconds per command, size of a returned file), and the GPU
host's side: landing, installing, the environment the servers get, Triton's cache going back and forth."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.engine import driver
from benchmarks.engine import servers as sv
from benchmarks.engine.errors import EngineHarnessError
from benchmarks.engine.transport import TRITON_CACHE, chunked, payload
from benchmarks.engine.transport.chunked import ChunkedSender, ChunkedTransport
from builder.config import launch_plan, load_target
from tests.benchmarks.engine.test_engine_payload import fake_triton_archive

FIXTURES = Path(__file__).parent / "fixtures"

SENDER = ChunkedSender()


def host(state: Path, **kw) -> ChunkedTransport:
    """The GPU host's side with its pieces and returned files beside the state."""
    kw.setdefault("pieces", state.parent / "pieces")
    kw.setdefault("out", state.parent / "out")
    return ChunkedTransport(state=state, **kw)


def empty_pieces(where: Path) -> Path:
    where.mkdir()
    (where / "manifest.json").write_text(json.dumps({"components": [], "pieces": []}))
    return where


def git_checkout(root: Path, travelling: int) -> Path:
    """A checkout whose tracked files weigh `travelling` bytes (plus .gitignore); .dev/ is ignored."""
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text(".dev/\n")
    (root / "evidence.bin").write_bytes(b"\0" * travelling)
    (root / ".dev").mkdir()
    return root


# ---------------------------------------------------------------------------------------------
# the commands


def test_arguments_are_checked(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        chunked.main(["land", "--pieces", str(tmp_path)])
    assert exc.value.code == 2 and "manifest.json" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text(json.dumps({"components": [], "pieces": []}))
    with pytest.raises(SystemExit):
        chunked.main(["measure", "--pieces", str(tmp_path)])
    assert "--out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        chunked.main(["measure", "--pieces", str(tmp_path), "--out", str(tmp_path / "o"), "--budget-s", "0"])
    assert "--budget-s" in capsys.readouterr().err
    for bad in ("", "gates,latency"):
        with pytest.raises(SystemExit):
            chunked.main(["measure", "--pieces", str(tmp_path), "--out", str(tmp_path / "o"), "--phases", bad])
        assert "--phases: choose from gates,fidelity,bench" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        chunked.main(["measure", "--pieces", str(tmp_path), "--out", str(tmp_path / "o"), "--bench-repeats", "0"])
    assert "--bench-repeats must be 1 or more, got 0" in capsys.readouterr().err


def test_one_command_per_piece_the_last_measures(tmp_path):
    calls = SENDER.commands(repo_rel=".dev/e", pieces=["piece-00", "piece-01", "piece-02"], budget_s=200)
    assert [c["send"][-1] for c in calls] == [".dev/e/pieces/piece-00", ".dev/e/pieces/piece-01", ".dev/e/pieces/piece-02"]
    assert all(c["send"][:2] == [".dev/e/run", ".dev/e/pieces/manifest.json"] for c in calls)
    assert all(" land " in c["command"] for c in calls[:-1])
    assert " measure " in calls[-1]["command"] and "--budget-s 200" in calls[-1]["command"]
    assert calls[-1]["timeout_s"] > 200
    assert all(len(c["command"]) <= 2000 for c in calls)  # the remote runner's limit


def test_every_command_runs_the_harness_as_a_module_from_the_run_trees_root(tmp_path):
    """No path set up in code: `cd` into the run tree, then `python3 -m`, so plain absolute imports work."""
    for c in SENDER.commands(repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=510):
        assert f"cd .dev/e/run && " in c["command"]
        assert f"python3 -m {chunked.HOST_MODULE} " in c["command"] and "--pieces ../pieces" in c["command"]
    # The module named there exists in the run tree `prepare` copies, and answers from its root.
    run = tmp_path / "run"
    run.mkdir()
    chunked.copy_run_tree(run)
    done = subprocess.run([sys.executable, "-m", chunked.HOST_MODULE, "measure", "--help"], cwd=run,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert done.returncode == 0 and "--return-mib" in done.stdout, done.stderr


def test_the_measuring_command_takes_phases_cells_and_repeats_from_prepare(tmp_path):
    calls = SENDER.commands(repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=510,
                            measure_args=("--phases", "bench", "--bench-cells", "32768x1,131072x1", "--bench-repeats", "3"))
    assert "--phases" not in calls[0]["command"]  # land commands stay as they are
    assert calls[-1]["command"].endswith(
        "--layout tp1 --phases bench --bench-cells 32768x1,131072x1 --bench-repeats 3 2>&1 | tee $OUT/driver.log")
    argv = calls[-1]["command"].split(" 2>&1")[0].split(f"{chunked.HOST_MODULE} ")[1].split()
    assert argv[argv.index("--bench-repeats") + 1] == "3"


def test_prepare_hands_the_ab_options_to_the_measuring_command_as_checked(tmp_path, monkeypatch, capsys):
    """What `prepare --phases ab ...` asks is what the measuring command runs: the order as parsed, the
    sweep's rates sorted, MTP and profiling as given; the payload itself is not built here."""
    from benchmarks.engine.__main__ import main

    seen = {}
    monkeypatch.setattr(chunked.ChunkedSender, "prepare", lambda self, **kw: seen.update(kw) or {"commands": []})
    assert main(["prepare", "--out", str(tmp_path / "e"), "--repo-root", str(tmp_path), "--phases", "ab",
                 "--ab-order", "int8-pinned-cold, int8", "--ab-sweep", "2,0.5", "--ab-mtp", "4",
                 "--ab-no-profile"]) == 0
    assert seen["measure_args"] == ("--phases", "ab", "--ab-order", "int8-pinned-cold,int8", "--ab-mtp", "4",
                                    "--ab-no-profile", "--ab-sweep", "0.5,2")
    assert seen["graphs"] is True  # the A/B measures what users run


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--phases", "bench,warp", "--phases: choose from gates,fidelity,bench"),
    ("--bench-cells", "1x1", "--bench-cells: '1x1' is not a grid cell"),
    ("--bench-repeats", "0", "--bench-repeats must be 1 or more, got 0"),
])
def test_prepare_refuses_measure_arguments_the_measuring_command_would_refuse(tmp_path, capsys, flag, value, said):
    from benchmarks.engine.__main__ import main

    with pytest.raises(SystemExit):
        main(["prepare", "--out", str(tmp_path / "e"), "--repo-root", str(tmp_path), flag, value])
    assert said in capsys.readouterr().err
    assert not (tmp_path / "e").exists()  # refused before anything is written


def test_prepare_refuses_a_measuring_budget_one_command_cannot_hold(tmp_path, capsys):
    from benchmarks.engine.__main__ import main

    with pytest.raises(SystemExit):
        main(["prepare", "--out", str(tmp_path / "o"), "--repo-root", str(tmp_path), "--budget-s", "511"])
    assert "--budget-s must be in 1..510" in capsys.readouterr().err
    calls = SENDER.commands(repo_rel=".dev/e", pieces=["piece-00"], budget_s=510)
    assert calls[-1]["timeout_s"] <= 600  # the remote runner's per-command limit


def test_the_run_tree_replaces_only_what_copy_run_tree_wrote(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    chunked.copy_run_tree(run)
    assert chunked._earlier_run_tree(run) is None
    (run / "notes.txt").write_text("mine")
    assert "notes.txt" in chunked._earlier_run_tree(run)


def test_the_servers_can_import_every_module_the_launch_plan_names(tmp_path):
    """A server dies in build_app when the plan's --middleware module is missing from the files sent to the GPU host."""
    run = tmp_path / "run"
    run.mkdir()
    chunked.copy_run_tree(run)
    plan = launch_plan(sv.arm_config(load_target(sv.TARGET), kv_dtype="int8_per_token_head", port=8101))
    modules = [f.value.rsplit(".", 1)[0] for f in plan.flags if f.flag == "--middleware"]
    assert modules, "the h200 launch names its middleware"
    # The transport as copied to the GPU host, asked from the run tree's root for the servers' environment.
    env_json = subprocess.run(
        [sys.executable, "-c", "import json, sys; from pathlib import Path;"
         " from benchmarks.engine.transport.chunked import ChunkedTransport as T;"
         " s = Path(sys.argv[1]); print(json.dumps(T(pieces=s, state=s, out=s).env()['PYTHONPATH']))",
         str(tmp_path / "state")],
        capture_output=True, text=True, check=True, cwd=run, env={"PATH": "/usr/bin:/bin"}).stdout
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": json.loads(env_json)}
    for mod in modules:
        r = subprocess.run([sys.executable, "-c", f"import {mod}"], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_tp2_ep_commands_ask_for_the_two_gpu_kind(tmp_path):
    calls = SENDER.commands(repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=510, layout="tp2-ep")
    assert {c["kind"] for c in calls} == {"nvidia-h200-x2"}
    assert "--layout tp2-ep" in calls[-1]["command"]


def test_the_measuring_command_sends_the_cache_only_when_asked(tmp_path):
    plain = SENDER.commands(repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=510)
    cached = SENDER.commands(repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=510, triton_cache=True)
    assert "--triton-cache" not in plain[-1]["command"] and ".dev/e/caches" not in plain[-1]["send"]
    assert cached[0] == plain[0]  # the land commands are unchanged
    assert cached[-1]["send"][-1] == ".dev/e/caches"
    assert "--triton-cache ../caches/triton-cache.tar.xz" in cached[-1]["command"]


# ---------------------------------------------------------------------------------------------
# the runner's limits are parameters


def test_a_piece_is_what_a_command_has_left_after_the_checkout(tmp_path):
    """Every command sends the checkout too, and it grows with the evidence: a piece gets what the command
    has left beside it, and one that no longer fits (a fixed 56 MiB here) is refused before anything is built."""
    import re

    repo = git_checkout(tmp_path / "repo", 10 << 20)
    (repo / ".dev" / "big.bin").write_bytes(b"\0" * (30 << 20))  # ignored: does not travel
    assert chunked.travelling_bytes(repo) == (10 << 20) + len(".dev/\n")
    with pytest.raises(EngineHarnessError, match="does not fit a command to the GPU host") as err:
        ChunkedSender(piece_bytes=56 << 20).prepare(out=repo / ".dev" / "e", repo_root=repo, budget_s=510)
    assert "leave --piece-mib out" in err.value.hint
    left = int(re.search(r"leave (\d+) MiB", str(err.value)).group(1))
    run_tree = sum(f.stat().st_size for f in (repo / ".dev" / "e" / "run").rglob("*") if f.is_file())
    assert left == (chunked.COMMAND_BYTES - (1 << 20) - chunked.travelling_bytes(repo) - run_tree) >> 20 < 56


def test_a_runner_that_sends_less_per_command_gets_smaller_pieces_and_more_commands(tmp_path):
    """command_bytes is the sender's parameter: the same 40 MiB payload takes one piece under today's
    64 MiB and two under 24 MiB, each within what its command has left."""
    repo = git_checkout(tmp_path / "repo", 1 << 20)
    run = repo / ".dev" / "run"
    run.mkdir()
    (run / "driver.py").write_bytes(b"#" * 4096)
    stream = tmp_path / "engine-tree.tar.xz"
    stream.write_bytes(b"\0" * (40 << 20))
    counts = {}
    for mib in (64, 24):
        sender = ChunkedSender(command_bytes=mib << 20)
        size = sender.piece_size(sender.room(repo, run))
        out = tmp_path / f"pieces-{mib}"
        out.mkdir()
        _, pieces = payload.split_stream(components=[stream], out_dir=out, piece_bytes=size)
        assert all(p.size <= size for p in pieces) and sum(p.size for p in pieces) == 40 << 20
        assert size + chunked.travelling_bytes(repo) + chunked.tree_bytes(run) < mib << 20
        calls = sender.commands(repo_rel=".dev/e", pieces=[p.name for p in pieces], budget_s=200)
        assert len(calls) == len(pieces)
        counts[mib] = len(pieces)
    assert counts == {64: 1, 24: 2}


def test_a_shorter_command_limit_bounds_the_budget_and_every_commands_time(tmp_path, capsys):
    from benchmarks.engine.__main__ import main

    short = ChunkedSender(command_s=300)
    assert short.max_budget_s == 300 - chunked.MEASURE_SLACK_S
    calls = short.commands(repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=short.max_budget_s)
    assert max(c["timeout_s"] for c in calls) == 300
    with pytest.raises(EngineHarnessError, match="does not fit one command"):
        short.commands(repo_rel=".dev/e", pieces=["piece-00"], budget_s=short.max_budget_s + 1)
    with pytest.raises(SystemExit):
        main(["prepare", "--out", str(tmp_path / "o"), "--repo-root", str(tmp_path), "--command-s", "300",
              "--budget-s", "250"])
    assert "--budget-s must be in 1..210" in capsys.readouterr().err


def test_the_return_limit_travels_from_the_sender_to_the_gpu_hosts_measure(tmp_path):
    calls = ChunkedSender(return_bytes=8 << 20).commands(repo_rel=".dev/e", pieces=["piece-00"], budget_s=200)
    assert "--return-mib 8 " in calls[-1]["command"]
    assert f"--return-mib {chunked.RETURN_BYTES >> 20} " in SENDER.commands(
        repo_rel=".dev/e", pieces=["piece-00"], budget_s=200)[-1]["command"]


# ---------------------------------------------------------------------------------------------
# the GPU host's side


def test_graphs_turn_eager_off_and_put_cutlass_on_the_path_only_when_asked(tmp_path):
    base = load_target(sv.TARGET)
    eager = launch_plan(sv.arm_config(base, kv_dtype="int8_per_token_head", port=8101))
    graphs = launch_plan(sv.arm_config(base, kv_dtype="int8_per_token_head", port=8101, graphs=True))
    assert "--enforce-eager" in {f.flag for f in eager.flags} and "--enforce-eager" not in {f.flag for f in graphs.flags}
    site = str(tmp_path / chunked.GRAPHS_SITE)
    assert site not in host(tmp_path).env()["PYTHONPATH"].split(":")
    assert host(tmp_path).env(graphs=True)["PYTHONPATH"].split(":")[0] == site
    calls = SENDER.commands(repo_rel=".dev/e", pieces=["piece-00"], budget_s=510, graphs=True)
    assert "--graphs" in calls[-1]["command"]


def test_graphs_without_cutlass_among_the_pieces_is_refused_with_the_fix(tmp_path):
    pieces, out = empty_pieces(tmp_path / "pieces"), tmp_path / "out"
    out.mkdir()
    t = ChunkedTransport(pieces=pieces, state=tmp_path / "state", out=out)
    assert driver.measure(t, budget_s=60, graphs=True) == 1
    assert "prepare --graphs" in json.loads((out / "summary.json").read_text())["error"]


def test_graphs_path_follows_the_cutlass_dsl_pth_file(tmp_path):
    """nvidia-cutlass-dsl's `cutlass` is reachable only through its .pth file, which a PYTHONPATH
    entry never runs (without it every graphs server dies on `No module named 'cutlass'`)."""
    site = tmp_path / chunked.GRAPHS_SITE
    pkg = site / "nvidia_cutlass_dsl" / "dsl_packages" / "cutlass"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    # The wheel's .pth (nvidia_cutlass_dsl_packages.pth) adds dsl_packages through an import line; a
    # path line is processed by the same site machinery, and no more by a PYTHONPATH entry.
    (site / "nvidia_cutlass_dsl_packages.pth").write_text(f"{pkg.parent}\n")
    probe = [sys.executable, "-c", "import cutlass"]
    env = host(tmp_path).env(graphs=True)
    assert subprocess.run(probe, env=env, capture_output=True).returncode == 0
    env["PYTHONPATH"] = env["PYTHONPATH"].replace(str(site / "nvidia_cutlass_dsl" / "dsl_packages") + ":", "")
    assert subprocess.run(probe, env=env, capture_output=True).returncode != 0  # the site dir alone is not enough


@pytest.mark.parametrize("xz_cli", [True, False], ids=["xz-cli", "stdlib-lzma"])
def test_a_triton_cache_goes_back_and_comes_again_to_a_machine_without_one(tmp_path, monkeypatch, xz_cli):
    """measure sends the machine's Triton cache back; a later measure on a fresh machine unpacks it
    where the servers look (TRITON_CACHE_DIR), and never over a cache the machine already has.
    Without the xz program the archive is written by the standard library alike."""
    import shutil

    if not xz_cli:
        real = shutil.which
        monkeypatch.setattr(chunked.shutil, "which", lambda name: None if name == "xz" else real(name))
    elif not shutil.which("xz"):
        pytest.skip("no xz program here")
    state, out, fresh = tmp_path / "state", tmp_path / "out", tmp_path / "fresh"
    out.mkdir()
    kernel = state / TRITON_CACHE / "ab12" / "kernel.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"\x7fELF" + bytes(range(256)) * 64)
    saved = host(state).save_cache()
    assert saved["returned"] and saved["files"] == 1 and not list(out.glob("*.part"))
    archive = out / chunked.CACHE_ARCHIVE
    again = host(fresh, triton_cache=archive)
    assert again.restore_cache() == 1
    assert (fresh / TRITON_CACHE / "ab12" / "kernel.cubin").read_bytes() == kernel.read_bytes()
    assert again.env()["TRITON_CACHE_DIR"] == str(fresh / TRITON_CACHE)
    (fresh / TRITON_CACHE / "ab12" / "kernel.cubin").write_bytes(b"newer")
    assert again.restore_cache() == 0  # a machine's own cache wins
    assert (fresh / TRITON_CACHE / "ab12" / "kernel.cubin").read_bytes() == b"newer"


def test_a_cache_over_the_return_limit_is_said_and_not_left_half_written(tmp_path):
    import os

    state, out = tmp_path / "state", tmp_path / "out"
    out.mkdir()
    (state / TRITON_CACHE).mkdir(parents=True)
    (state / TRITON_CACHE / "k.bin").write_bytes(os.urandom(64 << 10))
    saved = host(state, return_bytes=16 << 10).save_cache()
    assert saved["returned"] is False and saved["bytes"] > 16 << 10
    assert list(out.iterdir()) == []
    # Control: the same cache under today's limit comes back.
    assert host(state).save_cache()["returned"] is True and (out / chunked.CACHE_ARCHIVE).is_file()
    assert host(tmp_path / "empty").save_cache() == {"files": 0}


def test_a_second_measure_on_a_warm_machine_sends_back_only_its_own_results(tmp_path):
    """Eager, then graphs, on one machine: the second results.tar.gz must not hold the first run's files again."""
    import tarfile

    pieces, state = empty_pieces(tmp_path / "pieces"), tmp_path / "state"
    for run in ("first", "second"):
        out = tmp_path / run
        out.mkdir()
        assert driver.measure(ChunkedTransport(pieces=pieces, state=state, out=out), budget_s=60, graphs=True) == 1
        (state / "results" / f"{run}-only.json").write_text("{}")  # what a run leaves in its results
    with tarfile.open(tmp_path / "second" / "results.tar.gz") as tar:
        names = tar.getnames()
    assert "results/first-only.json" not in names
    assert (state / "results-1" / "first-only.json").is_file()  # kept, not deleted


def test_measure_on_the_gpu_host_runs_from_the_run_tree_and_returns_its_summary(tmp_path):
    """The measuring command as commands.json gives it, from a copied run tree's root: it lands, runs itself
    again with the landed site on PYTHONPATH, and the driver's summary comes back in --out. With no
    nvidia-cutlass-dsl among the (empty) pieces, --graphs ends the run early with the fix."""
    run = tmp_path / "run"
    run.mkdir()
    chunked.copy_run_tree(run)
    pieces, out = empty_pieces(tmp_path / "pieces"), tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", chunked.HOST_MODULE, "measure", "--pieces", "../pieces",
                           "--state", str(tmp_path / "state"), "--out", str(out), "--budget-s", "30", "--graphs"],
                          cwd=run, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["transport"] == "chunked" and summary["land"]["pieces_total"] == 0
    assert "prepare --graphs" in summary["error"]
    assert (out / "results.tar.gz").is_file()


def test_wheels_install_once_and_a_state_with_another_payloads_wheels_is_refused(tmp_path, monkeypatch):
    """A second measure on a warm machine reuses the install; a new payload landed on the same state
    (its wheels.tar unpacks beside the old wheels) must not silently keep the old packages."""
    calls = []
    monkeypatch.setattr(chunked.subprocess, "run", lambda cmd, check: calls.append(cmd))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    t = host(tmp_path)
    assert t.install_wheels() is False  # nothing landed yet
    (wheels / "a-1.0-py3-none-any.whl").write_bytes(b"")
    assert t.install_wheels() and len(calls) == 1
    assert (tmp_path / "site" / ".installed").read_text() == "a-1.0-py3-none-any.whl\n"
    assert t.install_wheels() and len(calls) == 1  # the same wheels: no second install
    (wheels / "lm_format_enforcer-0.11.3-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(RuntimeError, match="another payload landed on this state"):
        t.install_wheels()
    assert len(calls) == 1


def test_a_landed_lock_triton_comes_first_and_the_summary_names_it(tmp_path):
    """With state/triton-lock landed, every server imports it before the host's own Triton,
    registered in-tree; without it nothing changes (the control)."""
    import tarfile

    assert "TRITON_BACKENDS_IN_TREE" not in host(tmp_path).env()
    assert "-carried" not in sv.triton_in_use(host(tmp_path))
    lock = tmp_path / "triton-lock"
    lock.mkdir()
    with tarfile.open(fake_triton_archive(tmp_path / "t.tar.xz")) as tar:
        tar.extractall(lock, filter="data")
    env = host(tmp_path).env()
    assert env["PYTHONPATH"].split(":")[0] == str(lock) and env["TRITON_BACKENDS_IN_TREE"] == "1"
    assert sv.triton_in_use(host(tmp_path)) == f"3.8.0-carried {lock / 'triton' / '__init__.py'}"


def test_a_triton_archive_not_from_the_engine_locks_pin_is_refused(tmp_path):
    from benchmarks.kernels.device_triton import LOCK, lock_pin

    pin = lock_pin(LOCK)
    assert chunked.check_triton_archive(fake_triton_archive(tmp_path / "ok.tar.xz", pin)).startswith(f"triton-{pin}-")
    with pytest.raises(EngineHarnessError, match="the engine lock pins triton"):
        chunked.check_triton_archive(fake_triton_archive(tmp_path / "old.tar.xz", "3.6.0"))
    with pytest.raises(EngineHarnessError, match="no such archive"):
        chunked.check_triton_archive(tmp_path / "missing.tar.xz")
