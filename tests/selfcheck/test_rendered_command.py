"""The lint reads the command the rendered launch script would exec (DRY_RUN=1), and that command is
launch_plan()'s argv word for word, JSON values included; no engine needed."""

from __future__ import annotations

import json

import pytest

from builder.config import launch_plan, load_target
from builder.image.context import selfcheck_facts
from builder.launch import render_launch
from builder.selfcheck.__main__ import main
from builder.selfcheck.lint import LintFailed, SYNTHETIC_CONFIG, rendered_command, write_synthetic_model


@pytest.mark.parametrize("name", ["gb10", "cmp170hx-x2", "h200"])
def test_rendered_command_is_the_launch_plan(tmp_path, name):
    cfg = load_target(name)
    plan = launch_plan(cfg)
    for rel, text in render_launch(cfg=cfg, plan=plan).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    model = write_synthetic_model(tmp_path / "model")
    dirs = {name: tmp_path / name for name in selfcheck_facts(cfg)["launch_dirs"]}
    for path in dirs.values():
        path.mkdir()
    argv, env = rendered_command(launch_script=tmp_path / "launch/run_qsa_int8kv.sh", model_dir=model, dirs=dirs)
    assert argv == plan.argv(model_path=str(model))
    assert env == {e.name: e.value for e in plan.env}
    # The PLE targets map their table: the launch requires the table-file folder, and the lint gives one.
    assert list(dirs) == ["VLLM_PLE_MMAP_TABLE_DIR"]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "mtp", "num_speculative_tokens": 4}


def test_a_launch_script_that_refuses_is_reported(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("echo 'run.sh: MODEL_DIR has no config.json' >&2; exit 2\n")
    with pytest.raises(LintFailed) as err:
        rendered_command(launch_script=script, model_dir=tmp_path)
    assert err.value.stage == "launch script" and "no config.json" in err.value.message


def test_synthetic_model_has_qwen4exp_architecture_fields(tmp_path):
    config = json.loads((write_synthetic_model(tmp_path) / "config.json").read_text())
    assert config["architectures"] == ["Qwen4ExpForCausalLM"]
    assert config["ple_layer_ids"] and all(config["layer_types"][i - 1] == "linear_attention" for i in config["ple_layer_ids"])
    assert config["mtp_num_hidden_layers"] == 1
    assert config["indexer_budget"] // config["indexer_compress_ratio"] in (512, 1024, 2048)  # cooperative_topk's k
    assert config == SYNTHETIC_CONFIG


def test_selfcheck_without_target_facts_is_a_usage_error(tmp_path, capsys):
    assert main(["--target-file", str(tmp_path / "none.json")]) == 2
    assert "not a GPU image" in capsys.readouterr().err
