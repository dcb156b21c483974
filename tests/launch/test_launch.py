"""The rendered launch script: lint-clean, checks its inputs, and runs exactly the launch plan."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from builder.config import launch_plan, load_target, parse_config
from builder.config.ple import PLE_TABLE_DIR_ENV
from builder.errors import RenderError
from builder.launch import render_launch
from tests.launch.conftest import dry_run, launch_inputs, run_script


def test_shellcheck_and_bash_n(rendered):
    _, _, _, script, _ = rendered
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed: run `bash scripts/host-setup.sh` (or apt-get install shellcheck)")
    lint = subprocess.run(["shellcheck", "--severity=style", str(script)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


def test_dry_run_prints_the_plan(rendered, model_dir):
    _, _, plan, script, _ = rendered
    exports, argv = dry_run(script, model_dir)
    assert argv[1:] == plan.argv(model_path=str(model_dir))[1:]
    assert exports == [["export", f"{e.name}={e.value}"] for e in plan.env]


def _flag_value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} should appear once in {argv}"
    return argv[argv.index(flag) + 1]


def test_dry_run_flags_per_target(rendered, model_dir):
    name, _, _, script, _ = rendered
    exports, argv = dry_run(script, model_dir)
    env = dict(w[1].split("=", 1) for w in exports)

    assert json.loads(_flag_value(argv, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 4}
    assert env["HF_HUB_OFFLINE"] == "1"
    tp = ["--tensor-parallel-size", "2", "--enable-expert-parallel"]
    has_tp2_ep = any(argv[i : i + 3] == tp for i in range(len(argv)))
    assert has_tp2_ep == (name == "cmp170hx-x2")

    if name == "gb10-fork-preview":
        # The fork spells PLE offload as env vars and has no engram override.
        assert env["VLLM_PLE_CPU_OFFLOAD"] == "1" and env["VLLM_PLE_MMAP_TABLE"] == "1"
        assert env["VLLM_PLE_OFFLOAD_READY_TIMEOUT"] == "1800"
        assert "--engram-config" not in argv
        assert _flag_value(argv, "--kv-cache-dtype") == "fp8_e4m3"
    else:
        # Upstream 0.33.0 reads PLE offload from --engram-config (mmap_table from the ple-mmap patch)
        # and has only the engine-wide timeout.
        assert json.loads(_flag_value(argv, "--engram-config")) == {"cpu_offload": True, "mmap_table": True}
        assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "1800"
        assert not any(k.startswith("VLLM_PLE_") for k in env)
        assert _flag_value(argv, "--kv-cache-dtype") == "int8_per_token_head"
    if name.startswith("gb10"):
        assert (env["VLLM_USE_DEEP_GEMM"], env["CUTE_DSL_ARCH"]) == ("0", "sm_121a")
        assert _flag_value(argv, "--distributed-executor-backend") == "mp"


@pytest.mark.parametrize("rendered", ["gb10"], indirect=True)
def test_missing_or_wrong_model_dir_is_a_clear_error(rendered, tmp_path):
    _, _, _, script, _ = rendered
    unset = run_script(script, DRY_RUN="1")
    assert unset.returncode == 2
    assert "MODEL_DIR is not set" in unset.stderr and "export MODEL_DIR=" in unset.stderr
    assert unset.stdout == ""

    gone = run_script(script, MODEL_DIR=str(tmp_path / "nope"), DRY_RUN="1")
    assert gone.returncode == 2 and "is not a directory" in gone.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    no_config = run_script(script, MODEL_DIR=str(empty), DRY_RUN="1")
    assert no_config.returncode == 2 and "has no config.json" in no_config.stderr


@pytest.mark.parametrize("rendered", ["gb10"], indirect=True)
def test_extra_args_are_appended_and_the_command_really_runs(rendered, model_dir):
    _, _, _, script, _ = rendered
    _, argv = dry_run(script, model_dir, "--port", "9001")
    assert argv[-2:] == ["--port", "9001"]
    # Without DRY_RUN the script execs the printed command: here the test venv's python, which has no vllm.
    proc = run_script(script, PYTHON=sys.executable, **launch_inputs(model_dir))
    assert proc.returncode != 0
    assert "vllm.entrypoints.openai.api_server" in proc.stderr and "No module named 'vllm'" in proc.stderr

    missing = run_script(script, PYTHON="/nonexistent/python3", **launch_inputs(model_dir))
    assert missing.returncode == 2 and "set PYTHON" in missing.stderr


def test_awkward_values_survive_quoting(target_data, tmp_path, model_dir):
    data = target_data("h200")
    tricky = "it's \"$HOME\" `id` | x;y"
    data["server"]["extra_env"] = {"QFN_TRICKY": tricky}
    data["server"]["extra_args"] = ["--override-generation-config", tricky]
    cfg = parse_config(data, source="x")
    script = tmp_path / "run.sh"
    script.write_text(render_launch(cfg=cfg, plan=launch_plan(cfg))["launch/run_qsa_int8kv.sh"])
    exports, argv = dry_run(script, model_dir)
    assert ["export", f"QFN_TRICKY={tricky}"] in exports
    assert argv[-2:] == ["--override-generation-config", tricky]
    # SC2016 (info) would flag the literal $HOME, which is the point here; warnings and errors must stay clean.
    assert subprocess.run(["shellcheck", "--severity=warning", str(script)], capture_output=True).returncode == 0


def _unchecked(cfg, **sections):
    """`cfg` with sections replaced without validation: what a caller building configs in code
    could hand the renderer. Loading refuses these (tests/config); the renderer must hold anyway."""
    return cfg.model_copy(update={k: getattr(cfg, k).model_copy(update=v) for k, v in sections.items()})


@pytest.mark.parametrize("name", ["BAD NAME", "FOO\n", "1X"])
def test_bad_env_name_is_refused(name):
    cfg = _unchecked(load_target("h200"), server={"extra_env": {name: "1"}})
    with pytest.raises(RenderError, match="server.extra_env"):
        render_launch(cfg=cfg, plan=launch_plan(cfg))


def test_free_text_cannot_escape_a_comment(tmp_path, model_dir):
    cfg = load_target("h200")
    cfg = _unchecked(cfg, target={"description": "x86\ntouch PWNED"}, model={"served_name": "name\ntouch PWNED2"})
    script = tmp_path / "run.sh"
    script.write_text(render_launch(cfg=cfg, plan=launch_plan(cfg))["launch/run_qsa_int8kv.sh"])
    assert "# name touch PWNED2 with int8_per_token_head KV cache on h200: x86 touch PWNED\n" in script.read_text()
    assert run_script(script, cwd=tmp_path, DRY_RUN="1", **launch_inputs(model_dir)).returncode == 0
    assert not list(tmp_path.glob("PWNED*"))


def test_plan_warnings_are_printed_at_launch(tmp_path, model_dir):
    # gb10 against a series without the ple-mmap patch: the known out-of-host-memory gap.
    cfg = load_target("gb10")
    plan = launch_plan(cfg, series={"qsa-int8"})
    assert plan.warnings
    script = tmp_path / "run.sh"
    script.write_text(render_launch(cfg=cfg, plan=plan)["launch/run_qsa_int8kv.sh"])
    proc = run_script(script, MODEL_DIR=str(model_dir), DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    for w in plan.warnings:
        assert f"warning: {w}" in proc.stderr


@pytest.mark.parametrize("rendered", ["gb10", "cmp170hx-x2", "h200"], indirect=True)
def test_ple_table_dir_is_a_checked_input(rendered, model_dir, tmp_path):
    _, _, plan, script, doc = rendered
    assert plan.warnings == []
    assert "will run out of host memory" not in doc and "Known gaps" not in doc
    unset = run_script(script, MODEL_DIR=str(model_dir), DRY_RUN="1")
    assert unset.returncode == 2
    assert f"{PLE_TABLE_DIR_ENV} is not set" in unset.stderr and f"export {PLE_TABLE_DIR_ENV}=/path/to/ple-tables" in unset.stderr
    gone = run_script(script, MODEL_DIR=str(model_dir), DRY_RUN="1", **{PLE_TABLE_DIR_ENV: str(tmp_path / "nope")})
    assert gone.returncode == 2 and "is not a directory" in gone.stderr
    assert f"| `{PLE_TABLE_DIR_ENV}` |" in doc and "(must be a writable directory)" in doc


