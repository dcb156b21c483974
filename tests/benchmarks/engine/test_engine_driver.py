"""The measurement driver with a real transport and real endpoints: the phases run in PHASES order and
each is delivered as it ends, the budget decides what still starts, and a transport that cannot serve
ends the run with its reason in the summary and no server started. Nothing listens on the arms' port,
so every request fails fast; what is under test is the order, the clock and the summary."""

from __future__ import annotations

import json
import sys

from benchmarks.engine import driver
from benchmarks.engine import model as gen
from benchmarks.engine import servers as sv
from benchmarks.engine.phases import BUDGET_REASON
from benchmarks.engine.transport.local import LocalTransport
from builder.config import load_target


def arms(port: int, labels=("int8", "bf16")) -> dict:
    base = load_target(sv.TARGET)
    dtypes = {label: dtype for label, dtype, _ in sv.ARMS}
    return {label: {"cfg": sv.arm_config(base, kv_dtype=dtypes[label], port=port), "url": f"http://127.0.0.1:{port}",
                    "log": None} for label in labels}


def local_with_model(tmp_path) -> LocalTransport:
    """A local transport whose state holds the generated model's config (all the gates plan from)."""
    t = LocalTransport(out=tmp_path / "out", state=tmp_path / "state")
    t.model_dir.mkdir(parents=True)
    (t.model_dir / "config.json").write_text(json.dumps(
        gen.text_config(gen.SmallQwen4Exp(), vocab_size=49280, bos=1, eos=2, pad=2)))
    return t


def test_the_phases_run_in_order_whatever_order_they_are_named_and_each_is_delivered(tmp_path, free_port):
    t = local_with_model(tmp_path)
    servers = arms(free_port)
    for s in servers.values():
        s["log"] = tmp_path / "server.log"
        s["log"].write_text("")
    work = t.results_dir()
    summary: dict = {"phases": {}}
    delivered: list[list[str]] = []
    real_deliver = t.deliver

    def deliver(work, summary):  # the real delivery, and what it held when it ran
        real_deliver(work, summary)
        delivered.append([k for k in ("gates", "fidelity", "bench") if k in summary])

    t.deliver = deliver
    driver.run_phases(t, servers=servers, ready=list(servers), work=work, clock=driver.Clock(600), summary=summary,
                      phases=("bench", "fidelity", "gates"), bench_cells=frozenset({(8192, 1)}))
    assert list(summary["phases"]) == ["gates_s", "determinism_probe_s", "fidelity_s", "bench_s"]
    times = list(summary["phases"].values())
    assert times == sorted(times)
    # Delivered after the gates, after fidelity, and after each bench arm: a run stopped later keeps them.
    assert delivered == [["gates"], ["gates", "fidelity"], ["gates", "fidelity", "bench"],
                         ["gates", "fidelity", "bench"]]
    assert all(v["verdict"] == "error" for arm in summary["gates"].values() for v in arm.values())
    assert "error" in summary["fidelity"]  # the model dir holds no tokenizer: recorded, and the bench still ran
    assert [c["arm"] for c in summary["bench"]["cells"]] == ["int8", "bf16"]
    on_disk = json.loads((t.out / "summary.json").read_text())
    assert [c["arm"] for c in on_disk["bench"]["cells"]] == ["int8", "bf16"]


def test_a_phase_not_asked_for_does_not_run(tmp_path, free_port):
    t = local_with_model(tmp_path)
    summary: dict = {"phases": {}}
    driver.run_phases(t, servers=arms(free_port), ready=["int8", "bf16"], work=t.results_dir(),
                      clock=driver.Clock(600), summary=summary, phases=("bench",), bench_cells=frozenset({(8192, 4)}))
    assert list(summary["phases"]) == ["bench_s"] and "gates" not in summary and "fidelity" not in summary


def test_a_budget_too_short_skips_fidelity_and_every_bench_arm_with_the_reason(tmp_path, free_port):
    t = local_with_model(tmp_path)
    summary: dict = {"phases": {}}
    clock = driver.Clock(driver.BENCH_RESERVE_S - 1)
    assert clock.left() < driver.FIDELITY_MIN_S
    driver.run_phases(t, servers=arms(free_port), ready=["int8", "bf16"], work=t.results_dir(), clock=clock,
                      summary=summary, phases=("fidelity", "bench"), bench_cells=frozenset({(8192, 1), (32768, 4)}))
    assert "fidelity" not in summary and "fidelity_s" not in summary["phases"]
    assert summary["bench"]["cells"] == []
    assert {(s["arm"], s["input_len"], s["reason"]) for s in summary["bench"]["skipped"]} == {
        (a, n, BUDGET_REASON) for a in ("int8", "bf16") for n in (8192, 32768)}


def test_a_transport_that_cannot_serve_ends_the_run_with_its_reason_and_no_server(tmp_path):
    """This python has no vLLM: the local transport refuses in `ready`, before any server or model starts;
    the summary names the transport, the option and the cause, and is delivered to --out."""
    t = LocalTransport(out=tmp_path / "out", python=sys.executable, state=tmp_path / "state")
    assert driver.measure(t, budget_s=60, phases=("gates",)) == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["transport"] == "local" and summary["budget_s"] == 60
    assert "--python" in summary["error"] and "cannot import vllm" in summary["error"]
    assert "model_ready_s" not in summary["phases"] and "total_s" in summary["phases"]
    assert not list((tmp_path / "out").glob("server-*")) and not (tmp_path / "state" / "model.pid").exists()
