"""The model card: valid Hub metadata, and numbers only from evidence ("not measured" otherwise)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from builder.config import config_digest, launch_plan, load_target
from builder.errors import RenderError
from builder.plan import plan_target
from builder.bundle.card import card_context, plan_for_card, render_card

#: Kernel and engine evidence as a bundle carries it, trimmed (fixtures/README.md says from where).
EVIDENCE = Path(__file__).parent / "fixtures" / "evidence"


def _card(tmp_path, target="gb10", files=("README.md",), kernels_dir=None, cfg=None):
    cfg = cfg or load_target(target)
    capacity, error = plan_for_card(cfg)
    ctx = card_context(cfg=cfg, plan=launch_plan(cfg), evidence_dir=tmp_path / target, files=list(files),
                       capacity=capacity, capacity_error=error, kernels_dir=kernels_dir)
    return cfg, render_card(ctx)


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _gate(tmp_path, target, name, **extra):
    d = tmp_path / target
    d.mkdir(exist_ok=True)
    data = {"gate": name, "required": True, "verdict": "pass", "summary": "3/3", "created": "2026-11-20T10:00:00Z"}
    (d / f"{name}.json").write_text(json.dumps({**data, **extra}))


def _bench(tmp_path, target, workload, **metrics):
    d = tmp_path / target
    d.mkdir(exist_ok=True)
    (d / f"bench-{workload}.json").write_text(json.dumps({"workload": workload, **metrics}))


def test_metadata_loads_with_huggingface_hub(tmp_path):
    cfg, text = _card(tmp_path, "cmp170hx-x2")
    data = ModelCard(text).data
    assert data.library_name == "vllm"
    assert data.base_model == cfg.model.base_model
    assert data.license == "apache-2.0"
    assert {"vllm", "int8-per-token-head", "cmp170hx-x2"} <= set(data.tags)


def test_without_evidence_nothing_is_invented(tmp_path):
    _, text = _card(tmp_path)
    for title in ("Quality gates", "Benchmarks"):
        body = _section(text, title)
        assert "not measured" in body
        assert "PASS" not in body and "| ---" not in body
    assert not re.search(r"\bms\b|tok/s", _section(text, "Benchmarks"))


def test_evidence_values_are_shown(tmp_path):
    cfg = load_target("gb10")
    _gate(tmp_path, "gb10", "golden_probes", config_digest=config_digest(cfg))
    _gate(tmp_path, "gb10", "needle", verdict="fail", summary="MISS at 128K", required=False, config_digest="sha256:x")
    _bench(tmp_path, "gb10", "decode", mean_ttft_ms=1234.5, median_tpot_ms=12.345, output_throughput=456.7)
    _bench(tmp_path, "gb10", "prefill", output_throughput=99.0)
    _, text = _card(tmp_path)

    gates = _section(text, "Quality gates")
    assert "| golden_probes | yes | PASS | 3/3 | 2026-11-20 | this config |" in gates
    assert "| needle | no | FAIL | MISS at 128K | 2026-11-20 | another config |" in gates

    bench = _section(text, "Benchmarks")
    assert "| workload | TTFT mean (ms) | TPOT median (ms) | output tok/s |" in bench
    assert "| decode | 1,234.5 | 12.35 | 456.7 |" in bench
    assert "| prefill | not measured | not measured | 99.0 |" in bench


def test_bad_benchmark_file_is_an_error_not_a_blank(tmp_path):
    (tmp_path / "gb10").mkdir()
    (tmp_path / "gb10" / "bench-x.json").write_text("{not json")
    with pytest.raises(RenderError, match="bench-x.json"):
        _card(tmp_path)


def test_files_are_listed_with_their_role_and_evidence_one_row_per_folder(tmp_path):
    (tmp_path / "gb10" / "ab-x-vs-y").mkdir(parents=True)
    (tmp_path / "gb10" / "odd").mkdir()
    (tmp_path / "gb10" / "odd" / "README.md").write_text("intro\n# What the odd run shows\nmore\n")
    files = ("launch/run_qsa_int8kv.sh", "patches/series", "evidence/bench-a.json", "evidence/needle.json",
             "evidence/ab-x-vs-y/ab.json", "evidence/ab-x-vs-y/ab.md", "evidence/odd/README.md",
             "evidence/kernels/a.log", "evidence/kernels/b.json")
    _, text = _card(tmp_path, files=files, kernels_dir=EVIDENCE / "kernels")
    rows = _section(text, "Files")
    assert "| `launch/run_qsa_int8kv.sh` | launch recipe;" in rows
    assert "| `patches/series` | order in which the patches apply |" in rows
    assert "| `evidence/` | gate evidence (`<gate>.json`: verdict, thresholds, raw records) and benchmark results " \
        "(`bench-*`) (2 files at the top level) |" in rows
    assert "| `evidence/ab-x-vs-y/` | interleaved A/B benchmark of two server configs (per-pair deltas with spread) " \
        "(2 files) |" in rows
    assert "| `evidence/odd/` | What the odd run shows (1 file) |" in rows  # its README's heading
    heading = (EVIDENCE / "kernels" / "README.md").read_text().split("\n")[0].removeprefix("# ")
    assert f"| `evidence/kernels/` | {heading} (2 files) |" in rows
    assert "evidence/bench-a.json" not in rows and "ab.md" not in rows  # grouped, not listed one by one


def test_plan_warnings_are_caveats(tmp_path):
    # gb10 against a series without the ple-mmap patch has a known gap.
    cfg = load_target("gb10")
    plan = launch_plan(cfg, series={"qsa-int8"})
    text = render_card(card_context(cfg=cfg, plan=plan, evidence_dir=tmp_path / "gb10", files=["README.md"]))
    assert plan.warnings
    assert all(w in _section(text, "Caveats") for w in plan.warnings)


def test_only_top_level_gate_files_are_called_gate_evidence():
    from builder.bundle.card import describe_file

    assert describe_file("evidence/needle.json").startswith("gate evidence")
    assert describe_file("evidence/bench-decode.json").startswith("benchmark result")
    assert describe_file("evidence/kernels/qsa-aot-sm_90.json").startswith("patched-kernel evidence")
    assert describe_file("evidence/kv-bfloat16/needle.json").startswith("supporting run")


def _rows(section: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| `")]


def _table_rows(section: str) -> list[list[str]]:
    """Every table row of a section, header and separator lines included."""
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines() if line.startswith("| ")]


@pytest.mark.parametrize("target", ["gb10", "cmp170hx-x2", "h200", "cpu-smoke"])
def test_card_leads_with_what_it_buys_and_every_computed_number_is_the_planners(tmp_path, target):
    cfg, text = _card(tmp_path, target)
    assert text.split("\n## ")[1].startswith("What it buys you")  # the first section
    plan = plan_target(cfg)
    rows = {r[0].split("`")[1]: r for r in _rows(_section(text, "What it buys you")) if r[-1] == "computed"}
    assert set(rows) == {d.kv_cache_dtype for d in plan.dtypes}
    for d in plan.dtypes:
        row = rows[d.kv_cache_dtype]
        assert row[2].split(" ")[0] == f"{d.kv_bytes_per_token_per_layer:,.0f}"
        assert row[4] == f"{d.pool_tokens:,}" and row[5] == f"{d.sessions:,}"
    scope = "per GPU" if cfg.target.gpu_count else "in host memory"
    assert f"KV budget {scope}: {plan.budget.kv_bytes / 2**30:,.2f} GiB" in text


def test_int8_row_shows_its_scale_bytes_and_the_configured_dtype_is_marked(tmp_path):
    _, text = _card(tmp_path, "cmp170hx-x2")
    row = next(r for r in _rows(_section(text, "What it buys you")) if r[0].startswith("`int8_per_token_head`"))
    assert row[0] == "`int8_per_token_head` (this release)"
    assert row[2] == "520 (8 of it fp32 scales)"  # 512 B of K/V rows + 2 x 4 B scales, one kv head per GPU at TP2


def test_measured_pools_come_from_gate_files_and_name_them(tmp_path):
    cfg = load_target("cpu-smoke")
    _gate(tmp_path, "cpu-smoke", "kv_pool", summary="46,592 tokens",
          observed={"kv_pool_tokens": 46592, "cache_config_info": {"cache_dtype": "auto", "kv_cache_max_concurrency": "22.75"}})
    (tmp_path / "cpu-smoke" / "kv-bfloat16").mkdir()
    (tmp_path / "cpu-smoke" / "kv-bfloat16" / "kv_pool.json").write_text(json.dumps({
        "gate": "kv_pool", "required": True, "verdict": "pass", "created": "2026-11-20T10:00:00Z",
        "observed": {"kv_pool_tokens": 93184, "cache_config_info": {"cache_dtype": "bfloat16"}}}))
    _, text = _card(tmp_path, "cpu-smoke", cfg=cfg)
    measured = [r for r in _rows(_section(text, "What it buys you")) if r[-1].startswith("measured")]
    assert measured == [
        ["`auto` (this release)", "-", "-", "-", "46,592", "22", "1.00x", "measured (`evidence/kv_pool.json`)"],
        ["`bfloat16`", "-", "-", "-", "93,184", "-", "2.00x", "measured (`evidence/kv-bfloat16/kv_pool.json`)"],
    ]


def test_kernel_speed_and_accuracy_are_the_files_numbers_labelled_h200_kernel_level(tmp_path):
    kernels = EVIDENCE / "kernels"
    _, text = _card(tmp_path, "gb10", kernels_dir=kernels)
    section = _section(text, "What it buys you")
    tritons = list(dict.fromkeys(json.loads((kernels / n).read_text())["versions"]["triton"] for n in ("qsa-grid-engine-h200.json", "qsa-grid-h200.json")))
    assert f"Kernel level, measured on one H200 (sm_90) under Triton {' and '.join(tritons)}, not on gb10" in section
    judged_by = {}
    for selections, name in (("engine", "qsa-grid-engine-h200.json"), ("uniform", "qsa-grid-h200.json")):
        assert f"`evidence/kernels/{name}`" in section
        judged = judged_by[selections] = [p for p in json.loads((kernels / name).read_text())["points"] if p["goal_in_scope"]]
        by_rows: dict[str, list[dict]] = {}
        for p in judged:
            by_rows.setdefault(p["rows_label"], []).append(p)
        for label, points in by_rows.items():
            fp8 = [p["int8_speedup_over_fp8"]["graph"] for p in points]
            met = sum(p["goal_met"] for p in points)
            row = next(r for r in _table_rows(section) if r[:2] == [selections, label])
            assert row[3] in (f"{min(fp8):.2f}-{max(fp8):.2f}x", f"{min(fp8):.2f}x"), row
            assert row[5] == f"{met} of {len(points)}", row
    # Honest about misses: the uniform grid has points where int8 is below the goal, and the card shows them.
    assert any(not p["goal_met"] for p in judged_by["uniform"])
    uniform_met = sum(int(r[5].split(" of ")[0]) for r in _table_rows(section) if r[0] == "uniform" and " of " in r[5])
    assert uniform_met < len(judged_by["uniform"])
    # ... and below the goal's scope too: the points where int8 loses to bf16, counted from the files.
    for selections, name in (("engine", "qsa-grid-engine-h200.json"), ("uniform", "qsa-grid-h200.json")):
        small = [p for p in json.loads((kernels / name).read_text())["points"] if not p["goal_in_scope"]]
        slower = [p["int8_speedup_over_bf16"]["graph"] for p in small if p["int8_speedup_over_bf16"]["graph"] < 1]
        note = f"{selections}: {len(slower)} of {len(small)} points"
        assert (note in section) == bool(slower), (note, section)
        if slower:
            assert f"{min(slower):.2f}" in section.split(note, 1)[1].split("speed", 1)[0]
    accuracy = json.loads((kernels / "qsa-int8-accuracy.json").read_text())["inputs"]
    for name, result in accuracy.items():
        worst = {a: max(w[a]["total"] for w in result["widths"].values()) for a in ("bf16", "fp8", "int8")}
        row = next(r for r in _table_rows(section) if r[0] == name)
        assert row[5:8] == [f"{worst['bf16']:.2g}", f"{worst['fp8']:.2g}", f"{worst['int8']:.2g}"], row
    # Without the kernel evidence in the bundle (cpu-smoke applies no patches) there is no kernel table.
    _, plain = _card(tmp_path, "gb10")
    assert "Kernel level" not in plain and " ms |" not in _section(plain, "What it buys you")


def test_capacity_the_planner_cannot_compute_says_why_and_shows_no_pool(tmp_path, target_data):
    from builder.config import parse_config

    from tests.conftest import on_fork_preview

    _, text = _card(tmp_path, cfg=parse_config(on_fork_preview(target_data("gb10")), source="fork"))
    section = _section(text, "What it buys you")
    assert "Capacity: not computed (engine.profile vllm-fork-preview: the planner does not model" in section
    assert "| `" not in section


def test_the_engine_pool_check_is_one_labelled_line_from_its_file(tmp_path):
    """engine-h200/kv-pools.json (benchmarks.engine.report) says how close vLLM's own pools
    came to the planner's; the card repeats its numbers, labelled as the small random-weight model."""
    from builder.constants import ENGINE_EVIDENCE, ENGINE_POOLS_FILE

    check = json.loads((EVIDENCE / ENGINE_EVIDENCE / ENGINE_POOLS_FILE).read_text())
    arms = {a["kv_cache_dtype"]: a for a in check["arms"].values()}
    worst = max(abs(a["measured_tokens"] / a["planned_tokens"] - 1) for a in arms.values())
    int8 = arms["int8_per_token_head"]["measured_tokens"]
    _, text = _card(tmp_path, "h200", kernels_dir=EVIDENCE / "kernels")
    line = next(ln for ln in _section(text, "What it buys you").splitlines() if "Checked in the engine" in ln)
    assert "small Qwen4Exp with random weights (not the real model)" in line
    assert f"within {worst:.2%} of this planner's" in line
    assert f"int8 held {int8 / arms['auto']['measured_tokens']:.2f}x bf16's and {int8 / arms['fp8']['measured_tokens']:.2f}x fp8's" in line
    # A copy of the evidence without the file: no line; a broken file: an error naming the fix.
    root = tmp_path / "evidence"
    (root / "kernels").mkdir(parents=True)
    _, plain = _card(tmp_path, "h200", kernels_dir=root / "kernels")
    assert "Checked in the engine" not in plain
    (root / ENGINE_EVIDENCE).mkdir()
    (root / ENGINE_EVIDENCE / ENGINE_POOLS_FILE).write_text(json.dumps({"run": "x", "arms": {}}))
    with pytest.raises(RenderError, match="benchmarks.engine.report"):
        _card(tmp_path, "h200", kernels_dir=root / "kernels")


def test_the_engine_fidelity_check_is_one_labelled_line_from_its_file(tmp_path):
    """engine-h200/fidelity.json (benchmarks.engine.report): int8's and fp8's KL to bf16 KV
    beside bf16 against itself, labelled as the small random-weight model, never the real one."""
    from builder.constants import ENGINE_EVIDENCE, ENGINE_FIDELITY_FILE

    check = json.loads((EVIDENCE / ENGINE_EVIDENCE / ENGINE_FIDELITY_FILE).read_text())
    arms = {a["kv_cache_dtype"]: a for a in check["arms"].values()}
    _, text = _card(tmp_path, "h200", kernels_dir=EVIDENCE / "kernels")
    line = next(ln for ln in _section(text, "What it buys you").splitlines() if "Fidelity checked in the engine" in ln)
    assert "small Qwen4Exp with random weights (not the real model)" in line
    kl = {d: f"{a['mean_kl']:.1e}" for d, a in arms.items()}
    assert (f"KL to bf16 KV was int8 {kl['int8_per_token_head']}, fp8 {kl['fp8']}, "
            f"bf16 against itself {kl['auto']}") in line
    assert f"over {arms['fp8']['prompts']} prompts of {check['prompt_tokens']:,} tokens" in line
    # A broken file is an error naming the fix, not a silent omission.
    root = tmp_path / "evidence"
    (root / "kernels").mkdir(parents=True)
    (root / ENGINE_EVIDENCE).mkdir()
    (root / ENGINE_EVIDENCE / ENGINE_FIDELITY_FILE).write_text(json.dumps({"run": "x", "arms": {"int8": {}}}))
    with pytest.raises(RenderError, match="fidelity check"):
        _card(tmp_path, "h200", kernels_dir=root / "kernels")


def test_a_bundle_whose_gates_did_not_pass_says_so_first_and_is_tagged(tmp_path):
    from builder import constants

    for name in constants.PUBLISH_REQUIRED_GATES:
        _gate(tmp_path, "gb10", name)
    _, passed = _card(tmp_path)
    assert "Quality gates have not passed" not in passed  # the control: every required gate passed
    assert constants.CARD_FAILED_GATES_TAG not in ModelCard(passed).data.tags

    _gate(tmp_path, "gb10", "needle", verdict="fail")
    (tmp_path / "gb10" / "battery.json").unlink()
    _, failed = _card(tmp_path)
    card = ModelCard(failed)
    assert card.text.lstrip().startswith("> [!WARNING]\n> **Quality gates have not passed for this bundle.**")
    assert "Not passed: battery (missing), needle (fail)." in card.text
    assert constants.CARD_FAILED_GATES_TAG in card.data.tags


def _ratio(value, low, high, verdict, n=5):
    from builder.bundle.engine_evidence import RatioEstimate

    return RatioEstimate(value=value, low=low, high=high, n=n, verdict=verdict)


def _ab_cell(input_len, concurrency, tpot, ttft, n=5):
    """A cell whose ratios are {'int8/fp8': (tpot, ttft), 'int8/bf16': (tpot, ttft)}, each (value, low, high, verdict)."""
    from builder.bundle.engine_evidence import ABCell, Estimate

    medians = {arm: {m: Estimate(value=10.0, low=9.5, high=10.5, n=n) for m in ("median_tpot_ms", "median_ttft_ms")}
               for arm in ("int8", "fp8", "bf16")}
    ratios = {pair: {"median_tpot_ms": _ratio(*tpot[pair], n=n), "median_ttft_ms": _ratio(*ttft[pair], n=n)}
              for pair in tpot}
    return ABCell(input_len=input_len, concurrency=concurrency, medians=medians, ratios=ratios)


def _write_engine_ab(root: Path, folder: str = "", **changes) -> Path:
    """evidence/engine-ab/[folder/]engine-ab.json under ``root``, built with the model the card reads (EngineAB):
    three cells written out of grid order, one with int8 slower, one whose intervals all include 1.0."""
    from builder.bundle.engine_evidence import EngineAB, StepBreakdown
    from builder.constants import ENGINE_AB_EVIDENCE, ENGINE_AB_FILE

    same = (1.01, 0.97, 1.04, "no difference measured")
    cells = [
        _ab_cell(32768, 1, tpot={"int8/fp8": (0.88, 0.85, 0.91, "faster"), "int8/bf16": (0.812, 0.79, 0.83, "faster")},
                 ttft={"int8/fp8": same, "int8/bf16": (1.07, 1.03, 1.10, "slower")}),
        _ab_cell(8192, 4, tpot={"int8/fp8": same, "int8/bf16": same}, ttft={"int8/fp8": same, "int8/bf16": same}),
        _ab_cell(8192, 1, tpot={"int8/fp8": (0.93, 0.90, 0.96, "faster"), "int8/bf16": (0.95, 0.91, 0.98, "faster")},
                 ttft={"int8/fp8": (0.99, 0.95, 1.02, "no difference measured"), "int8/bf16": (0.997, 0.996, 0.998, "faster")}),
    ]

    def step(arm, length, conc, bound, kind="decode"):
        return StepBreakdown(arm=arm, input_len=length, concurrency=conc, step_kind=kind, step_us=9000.0,
                             families={"attention": 2000.0, bound: 6000.0}, bound=bound)

    breakdown = [step("int8", 8192, 1, "host"), step("fp8", 8192, 1, "host"),
                 step("bf16", 32768, 1, "attention"), step("int8", 32768, 1, "attention", kind="mixed")]
    ab = EngineAB(run="run 2027-01-05-ab (2027-01-05-ab.json)",
                  label="engine on an H200, small Qwen4Exp with random weights (not the real model)",
                  hardware="NVIDIA H200 | 141 GB", mtp_k=0, order=["int8", "fp8", "bf16"], cells=cells,
                  breakdown=breakdown, agreement={"int8 8192x1": 0.012, "fp8 8192x1": 0.031})
    ab = ab.model_copy(update=changes)
    path = root / ENGINE_AB_EVIDENCE / folder / ENGINE_AB_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ab.model_dump_json(indent=2))
    return path


def _ab_card(tmp_path, **changes):
    root = tmp_path / "evidence"
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    _write_engine_ab(root, **changes)
    _, text = _card(tmp_path, "h200", kernels_dir=root / "kernels")
    return _section(text, "What it buys you")


def _ab_rows(section: str) -> dict[str, list[str]]:
    """The Engine A/B table's rows by cell; the header row under "header"."""
    rows = _table_rows(section.split("Engine A/B, measured", 1)[1])
    return {"header" if r[0] == "prompt x concurrency" else r[0]: r[1:] for r in rows if not r[0].startswith("---")}


def test_the_engine_ab_is_a_table_of_int8_ratios_with_intervals_verdicts_and_a_caption(tmp_path):
    section = _ab_card(tmp_path)
    rows = _ab_rows(section)
    assert rows["header"] == ["int8/fp8 TPOT", "int8/bf16 TPOT", "int8/fp8 TTFT", "int8/bf16 TTFT", "report"]
    assert [k for k in rows if k != "header"] == ["8K x 1", "8K x 4", "32K x 1"]  # grid order, not the file's
    assert rows["8K x 1"] == ["0.93x [0.90-0.96] faster", "0.95x [0.91-0.98] faster",
                              "0.99x [0.95-1.02] no difference measured",
                              "0.997x [0.996-0.998] faster", "1"]  # three digits: [1.00-1.00] would hide that 1.0 is outside
    assert rows["32K x 1"][:2] == ["0.88x [0.85-0.91] faster", "0.81x [0.79-0.83] faster"]
    caption = " ".join(section.split("Engine A/B, measured", 1)[1].split("\n| ", 1)[0].split())
    assert ("in the engine on an H200, small Qwen4Exp with random weights (not the real model), "
            "on NVIDIA H200 \\| 141 GB, not on h200") in caption  # the file's text is escaped for the table's markdown
    assert "each KV dtype served alone in turn" in caption and "MTP off" in caption
    assert ("- (1) run 2027-01-05-ab (2027-01-05-ab.json), arms served in the order int8, fp8, bf16 "
            "(`evidence/engine-ab/engine-ab.json`)") in caption
    assert "median over 5 repeats" in caption and "bootstrap 95% interval" in caption
    # Over the profiled decode steps only: the mixed step is not counted.
    assert "the decode step is bound by: host in 2 of 3, attention in 1 of 3." in caption
    assert ("run to run: the median TPOT of a second run was within 3.1% of this run's over the 2 arm and cell "
            "pairs compared") in caption
    assert "MTP on (k=4)" in _ab_card(tmp_path, mtp_k=4)
    assert "PLE table memory-mapped" not in section  # no int8-pinned arm: no PLE cost line


def test_an_engine_ab_cell_where_int8_is_slower_says_slower(tmp_path):
    rows = _ab_rows(_ab_card(tmp_path))
    assert rows["32K x 1"][3] == "1.07x [1.03-1.10] slower"
    # Control: the same cell with int8 faster there says faster, not slower.
    cell = _ab_cell(32768, 1, tpot={"int8/bf16": (0.93, 0.90, 0.96, "faster")}, ttft={"int8/bf16": (0.93, 0.90, 0.96, "faster")})
    assert _ab_rows(_ab_card(tmp_path, cells=[cell]))["32K x 1"][3] == "0.93x [0.90-0.96] faster"


def test_an_engine_ab_interval_that_includes_one_says_no_difference_measured(tmp_path):
    rows = _ab_rows(_ab_card(tmp_path))
    assert rows["8K x 4"] == ["1.01x [0.97-1.04] no difference measured"] * 4 + ["1"]
    assert rows["32K x 1"][2] == "1.01x [0.97-1.04] no difference measured"


def test_an_engine_ab_ratio_over_too_few_repeats_states_no_verdict_and_a_verdict_there_is_refused(tmp_path):
    """Over 3 repeats an interval that excludes 1.0 still gets no verdict (the bootstrap is too eager there);
    a file calling it faster is refused, never printed."""
    few = _ab_cell(8192, 1, tpot={"int8/fp8": (0.80, 0.75, 0.85, "too few repeats"),
                                  "int8/bf16": (1.01, 0.97, 1.04, "too few repeats")},
                   ttft={"int8/fp8": (0.80, 0.75, 0.85, "too few repeats"),
                         "int8/bf16": (0.80, 0.75, 0.85, "too few repeats")}, n=3)
    rows = _ab_rows(_ab_card(tmp_path, cells=[few]))
    assert rows["8K x 1"][:2] == ["0.80x [0.75-0.85] too few repeats", "1.01x [0.97-1.04] too few repeats"]
    eager = few.model_copy(update={"ratios": {**few.ratios, "int8/fp8": {
        **few.ratios["int8/fp8"], "median_tpot_ms": _ratio(0.80, 0.75, 0.85, "faster", n=3)}}})
    with pytest.raises(RenderError, match="the verdict 'faster' does not follow"):
        _ab_card(tmp_path, cells=[eager])


def test_without_the_engine_ab_file_there_is_no_table(tmp_path):
    root = tmp_path / "evidence"
    (root / "kernels").mkdir(parents=True)
    _, text = _card(tmp_path, "h200", kernels_dir=root / "kernels")
    assert "Engine A/B" not in text and "int8/fp8 TPOT" not in text
    # Nor without the patch series: the engine evidence comes with the kernels'.
    _write_engine_ab(root)
    _, plain = _card(tmp_path, "h200")
    assert "Engine A/B" not in plain


def test_an_invalid_engine_ab_file_is_an_error_naming_it_and_how_to_regenerate(tmp_path):
    root = tmp_path / "evidence"
    (root / "kernels").mkdir(parents=True)
    path = _write_engine_ab(root)
    command = "python -m benchmarks.engine.ab_report --run NAME=SUMMARY --out evidence/engine-ab"
    path.write_text(json.dumps({"run": "x", "cells": [{"input_len": 8192}]}))
    with pytest.raises(RenderError, match="engine-ab.json: not an engine A/B") as caught:
        _card(tmp_path, "h200", kernels_dir=root / "kernels")
    assert str(path) in caught.value.message and command in caught.value.hint
    # A verdict its own interval does not give is refused too, never printed.
    data = json.loads(_write_engine_ab(root).read_text())
    data["cells"][1]["ratios"]["int8/fp8"]["median_tpot_ms"]["verdict"] = "faster"  # 8K x 4: [0.97-1.04]
    path.write_text(json.dumps(data))
    with pytest.raises(RenderError, match="cell 8K x 4, int8/fp8 TPOT: the verdict 'faster' does not follow") as caught:
        _card(tmp_path, "h200", kernels_dir=root / "kernels")
    assert str(path) in caught.value.message and command in caught.value.hint


def test_the_engine_ab_folder_says_what_it_holds_without_a_readme(tmp_path):
    _, text = _card(tmp_path, files=("README.md", "evidence/engine-ab/engine-ab.json"))
    assert "| `evidence/engine-ab/` | engine A/B of int8, fp8 and bf16 KV, each served alone" in _section(text, "Files")


def _pinned_cell(input_len, concurrency, tpot, ttft):
    """A cell of an int8-pinned vs int8 run: its one ratio is the variant over its base, as ab_report writes it."""
    from builder.bundle.engine_evidence import ABCell, Estimate

    medians = {arm: {m: Estimate(value=10.0, low=9.5, high=10.5, n=5) for m in ("median_tpot_ms", "median_ttft_ms")}
               for arm in ("int8-pinned", "int8")}
    return ABCell(input_len=input_len, concurrency=concurrency, medians=medians,
                  ratios={"int8-pinned/int8": {"median_tpot_ms": _ratio(*tpot), "median_ttft_ms": _ratio(*ttft)}})


def _ab_reports_card(tmp_path, *reports):
    """The card over several reports, each (folder, changes) written by _write_engine_ab."""
    root = tmp_path / "evidence"
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    for folder, changes in reports:
        _write_engine_ab(root, folder, **changes)
    _, text = _card(tmp_path, "h200", kernels_dir=root / "kernels")
    return _section(text, "What it buys you")


def test_engine_ab_reports_are_combined_per_cell_each_row_naming_its_report(tmp_path):
    """Two runs of one GPU, one table: a cell only one report measured takes that report's ratios; a
    cell both measured takes the one checked against a second run, and the other's value is listed,
    not dropped; a pair no report measured at a cell says so."""
    long = [_ab_cell(131072, 1, tpot={"int8/fp8": (0.91, 0.89, 0.93, "faster")},
                     ttft={"int8/fp8": (1.06, 1.02, 1.09, "slower")}),
            _ab_cell(8192, 1, tpot={"int8/fp8": (1.05, 1.02, 1.08, "slower")},
                     ttft={"int8/fp8": (1.00, 0.97, 1.03, "no difference measured")})]
    # Listed first (path order), without a second run: its 8K x 1 must lose to the checked report's.
    section = _ab_reports_card(tmp_path, ("a-long", {"run": "run long (long.json)", "order": ["int8", "fp8"],
                                                     "cells": long, "agreement": {}, "breakdown": []}),
                               ("b-grid", {}))
    assert section.count("Engine A/B, measured") == 1
    rows = _ab_rows(section)
    assert [k for k in rows if k != "header"] == ["8K x 1", "8K x 4", "32K x 1", "128K x 1"]
    assert rows["8K x 1"] == ["0.93x [0.90-0.96] faster", "0.95x [0.91-0.98] faster",
                              "0.99x [0.95-1.02] no difference measured", "0.997x [0.996-0.998] faster", "2"]
    assert rows["128K x 1"] == ["0.91x [0.89-0.93] faster", "not measured", "1.06x [1.02-1.09] slower",
                                "not measured", "1"]  # int8 slower there says slower; no bf16 arm: not measured
    assert "- (1) run long (long.json), arms served in the order int8, fp8 (`evidence/engine-ab/a-long/engine-ab.json`)" in section
    assert "- (2) run 2027-01-05-ab (2027-01-05-ab.json), arms served in the order int8, fp8, bf16" in section
    also = " ".join(section.split("Measured in more than one report", 1)[1].split("\n\n", 1)[0].split())
    assert "8K x 1 int8/fp8 TPOT: (1) 1.05x [1.02-1.08] slower; the table shows (2)'s" in also
    assert "8K x 1 int8/fp8 TTFT: (1) 1.00x [0.97-1.03] no difference measured; the table shows (2)'s" in also
    assert "int8/bf16" not in also  # only report 2 measured bf16


def test_engine_ab_reports_of_another_gpu_get_their_own_table(tmp_path):
    other = {"label": "engine on an NVIDIA H100 80GB HBM3, small Qwen4Exp with random weights (not the real model)",
             "hardware": "NVIDIA H100 80GB HBM3, driver 580.159.04, 16 CPUs", "run": "run h100 (h100.json)"}
    section = _ab_reports_card(tmp_path, ("h100", other), ("h200", {}))
    tables = section.split("Engine A/B, measured")[1:]
    assert len(tables) == 2
    assert tables[0].startswith(" in the engine on an NVIDIA H100 80GB HBM3") and "(1) run h100 (h100.json)" in tables[0]
    assert tables[1].startswith(" in the engine on an H200") and "(1) run 2027-01-05-ab" in tables[1]
    assert "Measured in more than one report" not in section  # the same cells on two GPUs are not one cell twice


def test_the_ple_cost_line_is_int8_mapped_over_int8_pinned_and_says_slower_where_mapping_costs(tmp_path):
    """The report holds int8-pinned/int8; the card states mapped over pinned, the interval inverted with
    it, so a pinned arm that is faster reads as int8 (mapped) slower; a cell where no ratio to fp8 or
    bf16 was measured adds no row to the table."""
    pinned = {"run": "run pinned (pinned.json)", "order": ["int8-pinned", "int8"], "agreement": {}, "breakdown": [],
              "cells": [_pinned_cell(8192, 16, tpot=(0.80, 0.75, 0.85, "faster"),
                                     ttft=(0.95, 0.90, 1.05, "no difference measured")),
                        _pinned_cell(32768, 4, tpot=(1.00, 0.98, 1.03, "no difference measured"),
                                     ttft=(1.25, 1.20, 1.30, "slower"))]}
    section = _ab_reports_card(tmp_path, ("grid", {}), ("pinned", pinned))
    line = " ".join(section.split("PLE table memory-mapped", 1)[1].split("\n\n", 1)[0].split())
    assert "int8's median over int8-pinned's, the inverse of report (2)'s int8-pinned/int8" in line
    assert ("8K x 16: TPOT 1.25x [1.18-1.33] slower, TTFT 1.05x [0.95-1.11] no difference measured; "
            "32K x 4: TPOT 1.00x [0.97-1.02] no difference measured, TTFT 0.80x [0.77-0.83] faster.") in line
    rows = _ab_rows(section.split("PLE table memory-mapped", 1)[0])
    assert "8K x 16" not in rows and "32K x 4" not in rows and all(r[-1] == "1" for k, r in rows.items() if k != "header")
    # A pinned ratio whose verdict its interval does not give is refused, as in the table.
    bad = pinned["cells"][0].model_copy(update={"ratios": {"int8-pinned/int8": {
        **pinned["cells"][0].ratios["int8-pinned/int8"], "median_tpot_ms": _ratio(0.95, 0.90, 1.05, "faster")}}})
    with pytest.raises(RenderError, match="cell 8K x 16, int8/int8-pinned TPOT: the verdict 'faster' does not follow"):
        _ab_reports_card(tmp_path / "bad", ("pinned", {**pinned, "cells": [bad]}))
