"""The device driver's CPU-testable parts: argument handling, the per-arm launch rendered from the
h200-small target (which must keep the h200 launch), the calls to the GPU host, and log triage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.engine import device
from benchmarks.engine.__main__ import host_calls
from benchmarks.engine import model as gen
from benchmarks.engine.errors import EngineHarnessError
from builder.config import launch_plan, load_target
from builder.errors import ConfigError


def flags(plan) -> dict[str, str | None]:
    return {f.flag: f.value for f in plan.flags}


def test_h200_small_keeps_every_h200_launch_flag_and_env_ple_included():
    h200_plan, small_plan = launch_plan(load_target("h200")), launch_plan(load_target("h200-small"))
    h200, small = flags(h200_plan), flags(small_plan)
    # differences the target file documents: model name and GPU share; PLE is the h200's (mmap'd table)
    for flag, value in h200.items():
        assert flag in small, flag
        if flag not in ("--served-model-name", "--gpu-memory-utilization"):
            assert small[flag] == value, flag
    assert json.loads(small["--engram-config"]) == {"cpu_offload": True, "mmap_table": True}
    assert {e.name: e.value for e in h200_plan.env}.items() <= {e.name: e.value for e in small_plan.env}.items()
    assert {r.env for r in h200_plan.required} == {r.env for r in small_plan.required}
    assert "--enforce-eager" in small and "--kv-cache-memory-bytes" in small


def test_each_arm_is_the_target_with_one_kv_dtype_and_port():
    base = load_target(device.TARGET)
    int8 = device.arm_config(base, kv_dtype="int8_per_token_head", port=8101)
    fp8 = device.arm_config(base, kv_dtype="fp8", port=8102)
    assert (int8.kv_cache.scale_layout, fp8.kv_cache.scale_layout) == ("side", None)
    argv = launch_plan(fp8).argv(model_path="/m")
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8" and argv[argv.index("--port") + 1] == "8102"
    with pytest.raises(ConfigError, match="kv_cache.dtype"):
        device.arm_config(base, kv_dtype="int4", port=1)


def test_the_arms_are_int8_fp8_and_bf16_on_distinct_ports():
    assert [a[1] for a in device.ARMS] == ["int8_per_token_head", "fp8", "auto"]
    assert len({a[2] for a in device.ARMS}) == 3


def test_marker_name_matches_the_generator():
    assert device.MODEL_MARKER == gen.MARKER


def test_arguments_are_checked(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        device.main(["land", "--carried", str(tmp_path)])
    assert exc.value.code == 2 and "manifest.json" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text(json.dumps({"components": [], "pieces": []}))
    with pytest.raises(SystemExit):
        device.main(["measure", "--carried", str(tmp_path)])
    assert "--out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        device.main(["measure", "--carried", str(tmp_path), "--out", str(tmp_path / "o"), "--budget-s", "0"])
    assert "--budget-s" in capsys.readouterr().err
    for bad in ("", "gates,latency"):
        with pytest.raises(SystemExit):
            device.main(["measure", "--carried", str(tmp_path), "--out", str(tmp_path / "o"), "--phases", bad])
        assert "--phases: choose from gates,fidelity,bench" in capsys.readouterr().err


def test_root_cause_and_weight_load_triage(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "(Worker pid=1) INFO 11-30 19:01:21 [model_runner.py:399] Loading model from scratch...\n"
        "(Worker pid=1) ERROR 11-30 19:01:21 [multiproc_executor.py:1057] AssertionError: unsupported output_gate_type=None\n"
        "Exception: WorkerProc initialization failed due to an exception in a background process.\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n")
    causes = device.root_cause(log)
    assert causes[0] == "AssertionError: unsupported output_gate_type=None" and len(causes) == 3
    assert not device.weight_load_failed(causes)
    assert device.weight_load_failed(["ValueError: Following weights were not initialized from checkpoint: {...}"])


def test_one_call_per_piece_the_last_measures(tmp_path):
    calls = host_calls(out=tmp_path, repo_rel=".dev/e", pieces=["piece-00", "piece-01", "piece-02"], budget_s=200)
    assert [c["carry"][-1] for c in calls] == [".dev/e/carry/piece-00", ".dev/e/carry/piece-01", ".dev/e/carry/piece-02"]
    assert all(c["carry"][:2] == [".dev/e/run", ".dev/e/carry/manifest.json"] for c in calls)
    assert all(" land " in c["command"] for c in calls[:-1])
    assert " measure " in calls[-1]["command"] and "--budget-s 200" in calls[-1]["command"]
    assert calls[-1]["timeout_s"] > 200
    assert all(len(c["command"]) <= 2000 for c in calls)  # the remote runner's limit


def test_the_measuring_call_takes_phases_cells_and_repeats_from_prepare(tmp_path):
    calls = host_calls(out=tmp_path, repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=510,
                         measure_args=("--phases", "bench", "--bench-cells", "32768x1,131072x1", "--bench-repeats", "3"))
    assert "--phases" not in calls[0]["command"]  # land calls stay as they are
    assert calls[-1]["command"].endswith(
        "--layout tp1 --phases bench --bench-cells 32768x1,131072x1 --bench-repeats 3 2>&1 | tee $OUT/driver.log")
    argv = calls[-1]["command"].split(" 2>&1")[0].split("device.py ")[1].split()
    assert argv[argv.index("--bench-repeats") + 1] == "3"


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--phases", "bench,warp", "--phases: choose from gates,fidelity,bench"),
    ("--bench-cells", "1x1", "--bench-cells: '1x1' is not a grid cell"),
    ("--bench-repeats", "0", "--bench-repeats must be 1 or more, got 0"),
])
def test_prepare_refuses_measure_arguments_the_measuring_call_would_refuse(tmp_path, capsys, flag, value, said):
    from benchmarks.engine.__main__ import main

    with pytest.raises(SystemExit):
        main(["prepare", "--out", str(tmp_path / "e"), "--repo-root", str(tmp_path), flag, value])
    assert said in capsys.readouterr().err
    assert not (tmp_path / "e").exists()  # refused before anything is written


def test_prepare_refuses_a_measuring_budget_one_call_cannot_hold(tmp_path, capsys):
    from benchmarks.engine.__main__ import main

    with pytest.raises(SystemExit):
        main(["prepare", "--out", str(tmp_path / "o"), "--repo-root", str(tmp_path), "--budget-s", "511"])
    assert "--budget-s must be in 1..510" in capsys.readouterr().err
    calls = host_calls(out=tmp_path, repo_rel=".dev/e", pieces=["piece-00"], budget_s=510)
    assert calls[-1]["timeout_s"] <= 600  # the remote runner's per-call limit


def test_the_run_tree_replaces_only_what_copy_run_tree_wrote(tmp_path):
    from benchmarks.engine.__main__ import _earlier_run_tree, copy_run_tree

    run = tmp_path / "run"
    run.mkdir()
    copy_run_tree(run)
    assert _earlier_run_tree(run) is None
    (run / "notes.txt").write_text("mine")
    assert "notes.txt" in _earlier_run_tree(run)


def test_the_servers_can_import_every_module_the_launch_plan_names(tmp_path):
    """A server dies in build_app when the plan's --middleware module is missing from the files sent to the GPU host."""
    import subprocess
    import sys

    from benchmarks.engine.__main__ import copy_run_tree

    run = tmp_path / "run"
    run.mkdir()
    copy_run_tree(run)
    plan = launch_plan(device.arm_config(load_target(device.TARGET), kv_dtype="int8_per_token_head", port=8101))
    modules = [f.value.rsplit(".", 1)[0] for f in plan.flags if f.flag == "--middleware"]
    assert modules, "the h200 launch names its middleware"
    # The driver as copied to the device, asked for the environment it gives each server.
    env_json = subprocess.run(
        [sys.executable, "-c", "import json, sys; from pathlib import Path;"
         " import device; print(json.dumps(device.python_env(Path(sys.argv[1]))['PYTHONPATH']))",
         str(tmp_path / "state")],
        capture_output=True, text=True, check=True, cwd=run / "benchmarks" / "engine").stdout
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": json.loads(env_json)}
    for mod in modules:
        r = subprocess.run([sys.executable, "-c", f"import {mod}"], env=env, cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_gate_settings_resolve_for_every_arm_from_the_generated_config(tmp_path):
    """h200-small has no architecture file and no weight estimate, so gates planned from the target
    alone fail on ready servers. The driver plans from the generated config.json and the pinned KV bytes."""
    from builder.measure.settings import gate_settings

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(
        gen.text_config(gen.SmallQwen4Exp(), vocab_size=49280, bos=1, eos=2, pad=2)))
    # As on the device: the driver's builder is the copied run tree's, which must hold the patch series.
    import subprocess
    import sys

    from benchmarks.engine.__main__ import copy_run_tree

    run = tmp_path / "run"
    run.mkdir()
    copy_run_tree(run)
    script = (
        "import json, sys; from pathlib import Path; import device; from builder.config import load_target;"
        " from builder.measure.settings import gate_settings; base = load_target(device.TARGET);"
        " print(json.dumps({l: gate_settings(device.arm_config(base, kv_dtype=d, port=p), model_dir=Path(sys.argv[1]))"
        ".kv_pool_plan.model_dump(mode='json') for l, d, p in device.ARMS}))")
    r = subprocess.run([sys.executable, "-c", script, str(model)], capture_output=True, text=True, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{run}:{run / 'benchmarks' / 'engine'}"})
    assert r.returncode == 0, r.stderr[-2000:]
    pools = {}
    for label, plan in json.loads(r.stdout.strip().splitlines()[-1]).items():
        assert plan["kv_bytes"] == 24 << 30 and plan["budget_exact"]
        pools[label] = plan["pool_tokens"]
    # 512/520 of fp8 (the side-scale tail); under 2x bf16 because each hybrid page also holds GDN state.
    assert pools["int8"] > pools["fp8"] * 0.98 and pools["int8"] > pools["bf16"] * 1.85


def test_tp2_ep_layout_is_cmp170hx_x2s_split_on_the_small_model(target_data):
    """Issue 18 item 5: the same model served with TP2 + EP, int8 vs bf16; the split is read from
    the target that ships it, so a change there changes this run."""
    from benchmarks.engine.__main__ import LAYOUT_KINDS

    source, arms = device.LAYOUTS["tp2-ep"]
    split = load_target(source)
    assert [a[0] for a in arms] == ["int8", "bf16"] and LAYOUT_KINDS["tp2-ep"] == "nvidia-h200-x2"
    base = load_target(device.TARGET)
    for label, dtype, port in arms:
        cfg = device.arm_config(base, kv_dtype=dtype, port=port, layout="tp2-ep")
        f = flags(launch_plan(cfg))
        assert f["--tensor-parallel-size"] == str(split.parallel.tensor_parallel_size) == "2"
        assert "--enable-expert-parallel" in f and f["--kv-cache-dtype"] == dtype
        assert f["--distributed-executor-backend"] == "mp" and cfg.target.gpu_count == 2
    one = flags(launch_plan(device.arm_config(base, kv_dtype="auto", port=8103)))
    assert "--tensor-parallel-size" not in one and "--enable-expert-parallel" not in one


def test_tp2_ep_calls_ask_for_the_two_gpu_kind(tmp_path):
    calls = host_calls(out=tmp_path, repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=510, layout="tp2-ep")
    assert {c["kind"] for c in calls} == {"nvidia-h200-x2"}
    assert "--layout tp2-ep" in calls[-1]["command"]


def test_graphs_turn_eager_off_and_put_cutlass_on_the_path_only_when_asked(tmp_path):
    base = load_target(device.TARGET)
    eager = flags(launch_plan(device.arm_config(base, kv_dtype="int8_per_token_head", port=8101)))
    graphs = flags(launch_plan(device.arm_config(base, kv_dtype="int8_per_token_head", port=8101, graphs=True)))
    assert "--enforce-eager" in eager and "--enforce-eager" not in graphs
    site = str(tmp_path / device.GRAPHS_SITE)
    assert site not in device.python_env(tmp_path)["PYTHONPATH"].split(":")
    assert device.python_env(tmp_path, graphs=True)["PYTHONPATH"].split(":")[0] == site
    calls = host_calls(out=tmp_path, repo_rel=".dev/e", pieces=["piece-00"], budget_s=510, graphs=True)
    assert "--graphs" in calls[-1]["command"]


def test_graphs_without_cutlass_in_the_carry_is_refused_with_the_fix(tmp_path):
    carried, out = tmp_path / "carried", tmp_path / "out"
    carried.mkdir()
    out.mkdir()
    (carried / "manifest.json").write_text(json.dumps({"components": [], "pieces": []}))
    assert device.measure(carried=carried, state=tmp_path / "state", out=out, budget_s=60, graphs=True) == 1
    assert "prepare --graphs" in json.loads((out / "summary.json").read_text())["error"]


def test_graphs_path_follows_the_cutlass_dsl_pth_file(tmp_path):
    """nvidia-cutlass-dsl's `cutlass` is reachable only through its .pth file, which a PYTHONPATH
    entry never runs (without it every graphs server dies on `No module named 'cutlass'`)."""
    import subprocess
    import sys

    site = tmp_path / device.GRAPHS_SITE
    pkg = site / "nvidia_cutlass_dsl" / "dsl_packages" / "cutlass"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    # The wheel's .pth (nvidia_cutlass_dsl_packages.pth) adds dsl_packages through an import line; a
    # path line is processed by the same site machinery, and no more by a PYTHONPATH entry.
    (site / "nvidia_cutlass_dsl_packages.pth").write_text(f"{pkg.parent}\n")
    probe = [sys.executable, "-c", "import cutlass"]
    env = device.python_env(tmp_path, graphs=True)
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
        monkeypatch.setattr(device.shutil, "which", lambda name: None if name == "xz" else real(name))
    elif not shutil.which("xz"):
        pytest.skip("no xz program here")
    state, out, fresh = tmp_path / "state", tmp_path / "out", tmp_path / "fresh"
    out.mkdir()
    kernel = state / device.TRITON_CACHE / "ab12" / "kernel.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"\x7fELF" + bytes(range(256)) * 64)
    saved = device.save_cache(state, out)
    assert saved["returned"] and saved["files"] == 1 and not list(out.glob("*.part"))
    archive = out / device.CACHE_ARCHIVE
    assert device.restore_cache(archive, fresh) == 1
    assert (fresh / device.TRITON_CACHE / "ab12" / "kernel.cubin").read_bytes() == kernel.read_bytes()
    assert device.python_env(fresh)["TRITON_CACHE_DIR"] == str(fresh / device.TRITON_CACHE)
    (fresh / device.TRITON_CACHE / "ab12" / "kernel.cubin").write_bytes(b"newer")
    assert device.restore_cache(archive, fresh) == 0  # a machine's own cache wins
    assert (fresh / device.TRITON_CACHE / "ab12" / "kernel.cubin").read_bytes() == b"newer"


def test_a_cache_too_big_to_come_back_is_said_and_not_left_half_written(tmp_path, monkeypatch):
    import os

    state, out = tmp_path / "state", tmp_path / "out"
    out.mkdir()
    (state / device.TRITON_CACHE).mkdir(parents=True)
    (state / device.TRITON_CACHE / "k.bin").write_bytes(os.urandom(64 << 10))
    monkeypatch.setattr(device, "CACHE_RETURN_BYTES", 16 << 10)
    saved = device.save_cache(state, out)
    assert saved["returned"] is False and saved["bytes"] > 16 << 10
    assert list(out.iterdir()) == []
    assert device.save_cache(tmp_path / "empty", out) == {"files": 0}


def test_the_measuring_call_carries_the_cache_only_when_asked(tmp_path):
    plain = host_calls(out=tmp_path, repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=510)
    cached = host_calls(out=tmp_path, repo_rel=".dev/e", pieces=["piece-00", "piece-01"], budget_s=510,
                          triton_cache=True)
    assert "--triton-cache" not in plain[-1]["command"] and ".dev/e/caches" not in plain[-1]["carry"]
    assert cached[0] == plain[0]  # the land calls are unchanged
    assert cached[-1]["carry"][-1] == ".dev/e/caches"
    assert "--triton-cache .dev/e/caches/triton-cache.tar.xz" in cached[-1]["command"]


def test_a_piece_is_what_a_call_has_left_after_the_checkout(tmp_path):
    """Every call sends the checkout too, and it grows with the evidence: a piece gets what the call has
    left beside it, and one that no longer fits (a fixed 56 MiB here) is refused before anything is built."""
    import subprocess

    from benchmarks.engine.__main__ import CALL_BYTES, prepare, travelling_bytes

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text(".dev/\n")
    (repo / "evidence.bin").write_bytes(b"\0" * (10 << 20))
    (repo / ".dev").mkdir()
    (repo / ".dev" / "big.bin").write_bytes(b"\0" * (30 << 20))  # ignored: does not travel
    assert travelling_bytes(repo) == (10 << 20) + len(".dev/\n")
    with pytest.raises(EngineHarnessError, match="does not fit a call to the GPU host") as err:
        prepare(out=repo / ".dev" / "e", repo_root=repo, budget_s=510, piece_mib=56)
    assert "leave --piece-mib out" in err.value.hint
    import re

    left = int(re.search(r"leave (\d+) MiB", str(err.value)).group(1))
    run_tree = sum(f.stat().st_size for f in (repo / ".dev" / "e" / "run").rglob("*") if f.is_file())
    assert left == (CALL_BYTES - (1 << 20) - travelling_bytes(repo) - run_tree) >> 20 < 56


def test_a_server_log_keeps_its_start_up_and_its_end(tmp_path):
    """A tail alone begins after start-up and loses where the ~200 s to ready went."""
    log_path = tmp_path / "server-int8-checkpoint.log"
    log_path.write_text("\n".join(f"line {i}" for i in range(1000)))
    device.keep_tails({"int8": {"log": log_path}}, tmp_path)
    kept = (tmp_path / "server-int8-checkpoint.tail.log").read_text().splitlines()
    assert not log_path.exists()
    assert kept[:2] == ["line 0", "line 1"] and kept[-1] == "line 999"
    assert kept[device.LOG_HEAD_LINES] == f"[... {1000 - device.LOG_HEAD_LINES - device.LOG_TAIL_LINES} lines left out ...]"
    short = tmp_path / "short.log"
    short.write_text("a\nb")
    assert device.head_and_tail(short) == "a\nb"


def test_the_dummy_weights_retry_turns_the_ple_mmap_off():
    """The ple-mmap patch refuses load_format=dummy (it maps rows from the checkpoint): the retry
    must override the launch's --engram-config, last on the command line, keeping cpu_offload."""
    plan = launch_plan(load_target("h200-small"))
    assert json.loads(flags(plan)["--engram-config"])["mmap_table"] is True
    retry = list(device.DUMMY_RETRY_ARGS)
    assert retry[:2] == ["--load-format", "dummy"]
    assert json.loads(retry[retry.index("--engram-config") + 1]) == {"cpu_offload": True}


def test_every_folder_the_launch_requires_is_given_as_the_launch_script_would(tmp_path):
    plan = launch_plan(load_target("h200-small"))
    dirs = device.required_dirs(plan, tmp_path)
    assert set(dirs) == {r.env for r in plan.required if r.is_dir} - {"MODEL_DIR"} == {"VLLM_PLE_MMAP_TABLE_DIR"}
    assert all(Path(d).is_dir() and Path(d).is_relative_to(tmp_path) for d in dirs.values())


def test_the_device_gates_are_the_builders_and_the_api_surface_runs_last():
    from builder.constants import GATE_NAMES

    assert set(device.GATES) <= set(GATE_NAMES)
    assert device.GATES[-1] == "api_surface" and "determinism" in device.GATES


def test_a_second_measure_on_a_warm_machine_sends_back_only_its_own_results(tmp_path):
    """The next session measures eager, then graphs, on one machine: the second results.tar.gz must
    not carry the first run's files again."""
    import tarfile

    carried, state = tmp_path / "carried", tmp_path / "state"
    carried.mkdir()
    (carried / "manifest.json").write_text(json.dumps({"components": [], "pieces": []}))
    for run in ("first", "second"):
        out = tmp_path / run
        out.mkdir()
        assert device.measure(carried=carried, state=state, out=out, budget_s=60, graphs=True) == 1
        (state / "results" / f"{run}-only.json").write_text("{}")  # what a run leaves in its results
    with tarfile.open(tmp_path / "second" / "results.tar.gz") as tar:
        names = tar.getnames()
    assert "results/first-only.json" not in names
    assert (state / "results-1" / "first-only.json").is_file()  # kept, not deleted


def test_a_gate_that_raises_costs_only_its_own_verdict(tmp_path, free_port):
    """A gate that raises (api_surface without openai's jiter) must not take the arm's kv_pool,
    determinism and prefix_cache verdicts with it. Against a port nobody listens on every gate raises;
    each must come back under its own name."""
    import asyncio

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(
        gen.text_config(gen.SmallQwen4Exp(), vocab_size=49280, bos=1, eos=2, pad=2)))
    log = tmp_path / "server.log"
    log.write_text("")
    cfg = device.arm_config(load_target(device.TARGET), kv_dtype="int8_per_token_head", port=free_port)
    servers = {"int8": {"cfg": cfg, "url": f"http://127.0.0.1:{free_port}", "log": log}}
    out = asyncio.run(device.run_gates(servers, ["int8"], tmp_path / "work", model))
    assert list(out["int8"]) == list(device.GATES)
    assert all(v["verdict"] == "error" and "Connect" in v["error"] for v in out["int8"].values()), out


def test_bench_cells_pick_grid_cells_and_name_a_wrong_one(tmp_path, capsys):
    assert device.parse_bench_cells("") is None
    assert device.parse_bench_cells("131072x4, 131072x16") == {(131072, 4), (131072, 16)}
    for wrong in ("131072x5", "8192", "ax4"):
        with pytest.raises(ValueError, match="not a grid cell"):
            device.parse_bench_cells(wrong)
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(SystemExit):
        device.main(["measure", "--carried", str(tmp_path), "--out", str(tmp_path / "out"), "--bench-cells", "1x1"])
    assert "--bench-cells: '1x1' is not a grid cell" in capsys.readouterr().err


def test_an_arm_the_budget_no_longer_covers_is_skipped_and_each_arm_is_reported_as_it_ends(tmp_path, free_port):
    """An arm started without the budget to finish (bf16's 128K x c16 with 26 s left runs ~150 s) is
    killed with the cell's results unsent. Here int8's server holds each connection 1.5 s and then
    drops it; fp8 and bf16 listen nowhere. After int8's 1.5 s arm, 0.5 s of budget cannot cover
    the next arm of the same size: fp8 and bf16 are skipped, and int8's result was handed over
    the moment it ended."""
    import asyncio
    import socket
    import threading

    hold_s = 1.5
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            threading.Timer(hold_s, conn.close).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        base = load_target(device.TARGET)
        servers = {}
        for label, dtype, port in (("int8", "int8_per_token_head", listener.getsockname()[1]),
                                   ("fp8", "fp8", free_port), ("bf16", "auto", free_port)):
            servers[label] = {"cfg": device.arm_config(base, kv_dtype=dtype, port=port), "url": f"http://127.0.0.1:{port}"}
        work = tmp_path / "work"
        work.mkdir()
        handed: list[dict] = []
        # int8's warm-up and arm cost 1.5 s each: its arm starts with ~2 s left, fp8's with ~0.5 s.
        clock = device.Clock(2 * hold_s + 0.5)
        out = asyncio.run(device.run_bench(servers, ["int8", "fp8", "bf16"], work, clock, reserve_s=0,
                                           cells_wanted=frozenset({(8192, 1)}),
                                           on_result=lambda so_far: handed.append(json.loads(json.dumps(so_far)))))
    finally:
        listener.close()
    assert [c["arm"] for c in out["cells"]] == ["int8"] and out["cells"][0]["error"]
    assert [(s["arm"], s["reason"]) for s in out["skipped"]] == [("fp8", "device budget"), ("bf16", "device budget")]
    assert all(s["estimated_s"] >= hold_s - 0.2 for s in out["skipped"])
    assert len(handed) == 1 and [c["arm"] for c in handed[0]["cells"]] == ["int8"]
    assert (work / "bench-int8-in8192-c1.json").is_file()


def test_arm_order_is_a_latin_square_so_no_concurrency_level_always_runs_one_arm_first():
    """A rotation by cell count puts 3 arms over 3 concurrency levels in step, so every c1 cell would
    run int8 first, every c4 fp8 and every c16 bf16. Here each arm goes first once per level across the
    prompt lengths and once per length across the levels, and a repeat shifts the whole square."""
    arms = ["int8", "fp8", "bf16"]
    first = {(n, c): device.arm_order(arms, n, c)[0] for n in device.BENCH_LENGTHS for c in device.BENCH_CONCURRENCY}
    for c in device.BENCH_CONCURRENCY:
        assert sorted(first[(n, c)] for n in device.BENCH_LENGTHS) == sorted(arms)
    for n in device.BENCH_LENGTHS:
        assert sorted(first[(n, c)] for c in device.BENCH_CONCURRENCY) == sorted(arms)
    for key in first:
        assert sorted(device.arm_order(arms, *key)) == sorted(arms)
        assert device.arm_order(arms, *key, repeat=1)[0] != first[key]
    # Control: the old rotation by cell count gives every c1 cell the same first arm.
    old = {}
    for i, key in enumerate(first):
        old[key] = (arms[i % 3:] + arms[:i % 3])[0]
    assert {old[(n, 1)] for n in device.BENCH_LENGTHS} == {"int8"}


def test_bench_repeats_run_the_cells_again_and_keep_each_pass_apart(tmp_path, free_port):
    """--bench-repeats 2: each cell twice, the second pass's results tagged repeat 1 in the summary and
    written beside the first pass's files, never over them. Nothing listens, so every arm errors fast."""
    import asyncio

    base = load_target(device.TARGET)
    servers = {label: {"cfg": device.arm_config(base, kv_dtype=dtype, port=free_port), "url": f"http://127.0.0.1:{free_port}"}
               for label, dtype in (("int8", "int8_per_token_head"), ("fp8", "fp8"))}
    work = tmp_path / "work"
    work.mkdir()
    out = asyncio.run(device.run_bench(servers, ["int8", "fp8"], work, device.Clock(60), reserve_s=0,
                                       cells_wanted=frozenset({(8192, 1), (8192, 4)}), repeats=2))
    got = [(c["arm"], c["workload"], c["repeat"], c["position"]) for c in out["cells"]]
    assert got == [("int8", "in8192-c1", 0, 0), ("fp8", "in8192-c1", 0, 1), ("fp8", "in8192-c4", 0, 0), ("int8", "in8192-c4", 0, 1),
                   ("fp8", "in8192-c1", 1, 0), ("int8", "in8192-c1", 1, 1), ("int8", "in8192-c4", 1, 0), ("fp8", "in8192-c4", 1, 1)]
    assert out["repeats"] == 2 and all(c["error"] for c in out["cells"])
    assert sorted(f.name for f in work.iterdir()) == sorted(
        f"bench-{a}-in8192-c{c}{r}.json" for a in ("int8", "fp8") for c in (1, 4) for r in ("", "-r1"))


@pytest.mark.docker
@pytest.mark.slow
def test_every_arm_of_a_cell_is_sent_the_same_prompts_against_a_real_server(cpu_smoke_url, monkeypatch, tmp_path):
    """The cpu-smoke vLLM server stands in for each arm (only the prompts are under test): one cell of
    64-token prompts, 3 arms. Every arm's result names the same prompt nonce and prefilled the same
    number of tokens: the prompts were fitted once, on the first arm's server, and sent to all."""
    import asyncio
    from types import SimpleNamespace

    import httpx

    from builder.measure import client as bench

    async def served() -> str:
        async with httpx.AsyncClient() as client:
            return (await bench._served_model(client, cpu_smoke_url))[0]

    model = asyncio.run(served())
    monkeypatch.setattr(device, "BENCH_LENGTHS", (64,))
    monkeypatch.setattr(device, "BENCH_CONCURRENCY", (1,))
    arms = ["int8", "fp8", "bf16"]
    servers = {a: {"url": cpu_smoke_url, "cfg": SimpleNamespace(model=SimpleNamespace(served_name=model),
                                                                  kv_cache=SimpleNamespace(dtype=a))} for a in arms}
    work = tmp_path / "work"
    work.mkdir()
    out = asyncio.run(device.run_bench(servers, arms, work, device.Clock(600), reserve_s=0))
    cells = out["cells"]
    assert [c["arm"] for c in cells] == arms and all(c.get("completed") == 2 for c in cells), cells
    assert len({c["prompt_nonce"] for c in cells}) == 1
    assert len({c["total_input_tokens"] for c in cells}) == 1 and 100 <= cells[0]["total_input_tokens"] <= 128


def test_bench_repeats_below_one_are_refused(tmp_path, capsys):
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(SystemExit):
        device.main(["measure", "--carried", str(tmp_path), "--out", str(tmp_path / "out"), "--bench-repeats", "0"])
    assert "--bench-repeats must be 1 or more, got 0" in capsys.readouterr().err


def test_wheels_install_once_and_a_state_with_another_carrys_wheels_is_refused(tmp_path, monkeypatch):
    """A second measure on a warm machine reuses the install; a new carry landed on the same state
    (its wheels.tar unpacks beside the old wheels) must not silently keep the old packages."""
    calls = []
    monkeypatch.setattr(device.subprocess, "run", lambda cmd, check: calls.append(cmd))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    assert device.install_wheels(tmp_path) is False  # nothing landed yet
    (wheels / "a-1.0-py3-none-any.whl").write_bytes(b"")
    assert device.install_wheels(tmp_path) and len(calls) == 1
    assert (tmp_path / "site" / ".installed").read_text() == "a-1.0-py3-none-any.whl\n"
    assert device.install_wheels(tmp_path) and len(calls) == 1  # the same wheels: no second install
    (wheels / "lm_format_enforcer-0.11.3-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(RuntimeError, match="another carry landed on this state"):
        device.install_wheels(tmp_path)
    assert len(calls) == 1


def test_a_landed_lock_triton_comes_first_and_the_summary_names_it(tmp_path):
    """With state/triton-lock landed, every server (python_env) imports it before the device's own
    Triton, registered in-tree; without it nothing changes (the control)."""
    from tests.benchmarks.engine.test_engine_carry import fake_triton_archive
    import tarfile

    assert "TRITON_BACKENDS_IN_TREE" not in device.python_env(tmp_path)
    assert "-carried" not in device.triton_in_use(tmp_path)
    lock = tmp_path / "triton-lock"
    lock.mkdir()
    with tarfile.open(fake_triton_archive(tmp_path / "t.tar.xz")) as tar:
        tar.extractall(lock, filter="data")
    env = device.python_env(tmp_path)
    assert env["PYTHONPATH"].split(":")[0] == str(lock) and env["TRITON_BACKENDS_IN_TREE"] == "1"
    assert device.triton_in_use(tmp_path) == f"3.8.0-carried {lock / 'triton' / '__init__.py'}"


def test_a_triton_archive_not_from_the_engine_locks_pin_is_refused(tmp_path):
    from benchmarks.device_triton import LOCK, lock_pin
    from benchmarks.engine.__main__ import check_triton_archive
    from tests.benchmarks.engine.test_engine_carry import fake_triton_archive

    pin = lock_pin(LOCK)
    assert check_triton_archive(fake_triton_archive(tmp_path / "ok.tar.xz", pin)).startswith(f"triton-{pin}-")
    with pytest.raises(EngineHarnessError, match="the engine lock pins triton"):
        check_triton_archive(fake_triton_archive(tmp_path / "old.tar.xz", "3.6.0"))
    with pytest.raises(EngineHarnessError, match="no such archive"):
        check_triton_archive(tmp_path / "missing.tar.xz")
