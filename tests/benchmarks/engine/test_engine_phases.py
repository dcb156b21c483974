"""The measurement phases against real HTTP endpoints: gates that fail alone, the bench's budget, cells,
Latin-square arm order and repeats, and the gate settings planned from the generated model."""

from __future__ import annotations

import json

import pytest

from benchmarks.engine import model as gen
from benchmarks.engine import phases as ph
from benchmarks.engine import servers as sv
from benchmarks.engine.driver import Clock
from builder.config import load_target


def test_the_gates_are_the_builders_and_the_api_surface_runs_last():
    from builder.constants import GATE_NAMES

    assert set(ph.GATES) <= set(GATE_NAMES)
    assert ph.GATES[-1] == "api_surface" and "determinism" in ph.GATES


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
    cfg = sv.arm_config(load_target(sv.TARGET), kv_dtype="int8_per_token_head", port=free_port)
    servers = {"int8": {"cfg": cfg, "url": f"http://127.0.0.1:{free_port}", "log": log}}
    out = asyncio.run(ph.run_gates(servers, ["int8"], tmp_path / "work", model))
    assert list(out["int8"]) == list(ph.GATES)
    assert all(v["verdict"] == "error" and "Connect" in v["error"] for v in out["int8"].values()), out


def test_bench_cells_pick_grid_cells_and_name_a_wrong_one(tmp_path, capsys):
    assert ph.parse_bench_cells("") is None
    assert ph.parse_bench_cells("131072x4, 131072x16") == {(131072, 4), (131072, 16)}
    for wrong in ("131072x5", "8192", "ax4"):
        with pytest.raises(ValueError, match="not a grid cell"):
            ph.parse_bench_cells(wrong)
    # Both entry points refuse it before anything starts.
    from benchmarks.engine.__main__ import main
    from benchmarks.engine.transport.chunked import main as host_main

    (tmp_path / "manifest.json").write_text("{}")
    for argv in (["run", "--out", str(tmp_path / "out")], ["measure", "--pieces", str(tmp_path), "--out", str(tmp_path / "out")]):
        with pytest.raises(SystemExit):
            (main if argv[0] == "run" else host_main)([*argv, "--bench-cells", "1x1"])
        assert "--bench-cells: '1x1' is not a grid cell" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


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
        base = load_target(sv.TARGET)
        servers = {}
        for label, dtype, port in (("int8", "int8_per_token_head", listener.getsockname()[1]),
                                   ("fp8", "fp8", free_port), ("bf16", "auto", free_port)):
            servers[label] = {"cfg": sv.arm_config(base, kv_dtype=dtype, port=port), "url": f"http://127.0.0.1:{port}"}
        work = tmp_path / "work"
        work.mkdir()
        handed: list[dict] = []
        # int8's warm-up and arm cost 1.5 s each: its arm starts with ~2 s left, fp8's with ~0.5 s.
        clock = Clock(2 * hold_s + 0.5)
        out = asyncio.run(ph.run_bench(servers, ["int8", "fp8", "bf16"], work, clock, reserve_s=0,
                                           cells_wanted=frozenset({(8192, 1)}),
                                           on_result=lambda so_far: handed.append(json.loads(json.dumps(so_far)))))
    finally:
        listener.close()
    assert [c["arm"] for c in out["cells"]] == ["int8"] and out["cells"][0]["error"]
    assert [(s["arm"], s["reason"]) for s in out["skipped"]] == [("fp8", ph.BUDGET_REASON), ("bf16", ph.BUDGET_REASON)]
    assert all(s["estimated_s"] >= hold_s - 0.2 for s in out["skipped"])
    assert len(handed) == 1 and [c["arm"] for c in handed[0]["cells"]] == ["int8"]
    assert (work / "bench-int8-in8192-c1.json").is_file()


def test_arm_order_is_a_latin_square_so_no_concurrency_level_always_runs_one_arm_first():
    """A rotation by cell count puts 3 arms over 3 concurrency levels in step, so every c1 cell would
    run int8 first, every c4 fp8 and every c16 bf16. Here each arm goes first once per level across the
    prompt lengths and once per length across the levels, and a repeat shifts the whole square."""
    arms = ["int8", "fp8", "bf16"]
    first = {(n, c): ph.arm_order(arms, n, c)[0] for n in ph.BENCH_LENGTHS for c in ph.BENCH_CONCURRENCY}
    for c in ph.BENCH_CONCURRENCY:
        assert sorted(first[(n, c)] for n in ph.BENCH_LENGTHS) == sorted(arms)
    for n in ph.BENCH_LENGTHS:
        assert sorted(first[(n, c)] for c in ph.BENCH_CONCURRENCY) == sorted(arms)
    for key in first:
        assert sorted(ph.arm_order(arms, *key)) == sorted(arms)
        assert ph.arm_order(arms, *key, repeat=1)[0] != first[key]
    # Control: the old rotation by cell count gives every c1 cell the same first arm.
    old = {}
    for i, key in enumerate(first):
        old[key] = (arms[i % 3:] + arms[:i % 3])[0]
    assert {old[(n, 1)] for n in ph.BENCH_LENGTHS} == {"int8"}


def test_bench_repeats_run_the_cells_again_and_keep_each_pass_apart(tmp_path, free_port):
    """--bench-repeats 2: each cell twice, the second pass's results tagged repeat 1 in the summary and
    written beside the first pass's files, never over them. Nothing listens, so every arm errors fast."""
    import asyncio

    base = load_target(sv.TARGET)
    servers = {label: {"cfg": sv.arm_config(base, kv_dtype=dtype, port=free_port), "url": f"http://127.0.0.1:{free_port}"}
               for label, dtype in (("int8", "int8_per_token_head"), ("fp8", "fp8"))}
    work = tmp_path / "work"
    work.mkdir()
    out = asyncio.run(ph.run_bench(servers, ["int8", "fp8"], work, Clock(60), reserve_s=0,
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
    monkeypatch.setattr(ph, "BENCH_LENGTHS", (64,))
    monkeypatch.setattr(ph, "BENCH_CONCURRENCY", (1,))
    arms = ["int8", "fp8", "bf16"]
    servers = {a: {"url": cpu_smoke_url, "cfg": SimpleNamespace(model=SimpleNamespace(served_name=model),
                                                                  kv_cache=SimpleNamespace(dtype=a))} for a in arms}
    work = tmp_path / "work"
    work.mkdir()
    out = asyncio.run(ph.run_bench(servers, arms, work, Clock(600), reserve_s=0))
    cells = out["cells"]
    assert [c["arm"] for c in cells] == arms and all(c.get("completed") == 2 for c in cells), cells
    assert len({c["prompt_nonce"] for c in cells}) == 1
    assert len({c["total_input_tokens"] for c in cells}) == 1 and 100 <= cells[0]["total_input_tokens"] <= 128


def test_gate_settings_resolve_for_every_arm_from_the_generated_config(tmp_path):
    """h200-small has no architecture file and no weight estimate, so gates planned from the target
    alone fail on ready servers. The driver plans from the generated config.json and the pinned KV bytes."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(
        gen.text_config(gen.SmallQwen4Exp(), vocab_size=49280, bos=1, eos=2, pad=2)))
    # As on a remote GPU host: the driver's builder is the copied run tree's, which must hold the patch series.
    import subprocess
    import sys

    from benchmarks.engine.transport.chunked import copy_run_tree

    run = tmp_path / "run"
    run.mkdir()
    copy_run_tree(run)
    script = (
        "import json, sys; from pathlib import Path; from benchmarks.engine import servers as sv;"
        " from builder.config import load_target;"
        " from builder.measure.settings import gate_settings; base = load_target(sv.TARGET);"
        " print(json.dumps({l: gate_settings(sv.arm_config(base, kv_dtype=d, port=p), model_dir=Path(sys.argv[1]))"
        ".kv_pool_plan.model_dump(mode='json') for l, d, p in sv.ARMS}))")
    # From the run tree's root, as the GPU host runs the harness: no PYTHONPATH, no path set up in code.
    r = subprocess.run([sys.executable, "-c", script, str(model)], capture_output=True, text=True, cwd=run,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    pools = {}
    for label, plan in json.loads(r.stdout.strip().splitlines()[-1]).items():
        assert plan["kv_bytes"] == 24 << 30 and plan["budget_exact"]
        pools[label] = plan["pool_tokens"]
    # 512/520 of fp8 (the side-scale tail); under 2x bf16 because each hybrid page also holds GDN state.
    assert pools["int8"] > pools["fp8"] * 0.98 and pools["int8"] > pools["bf16"] * 1.85
