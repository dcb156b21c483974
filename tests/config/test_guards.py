"""A target file cannot subvert the launch: reserved env names, whole-name env checks, control
characters, a base image that only looks pinned, and coerced or non-finite values are refused
at load time, naming the field."""

from __future__ import annotations

import re
import subprocess

import pytest

from builder.config import launch_plan, load_target, parse_config
from builder.config.launch import MODEL_DIR_ENV
from builder.constants import LAUNCH_RESERVED_ENV, LAUNCH_SCRIPT_NAME, TARGETS_DIR
from builder.errors import ConfigError
from builder.launch import render_launch
from tests.launch.conftest import fork_preview


def _refused(data: dict, *expect: str) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(data, source="t.toml")
    text = str(exc.value)
    for s in expect:
        assert s in text, f"{s!r} missing from: {text}"
    return text


@pytest.mark.parametrize("name", sorted(LAUNCH_RESERVED_ENV))
def test_every_reserved_env_name_is_refused_in_extra_env(target_data, name):
    data = target_data("h200")
    data["server"]["extra_env"] = {name: "0"}
    _refused(data, f"server.extra_env.{name}", "launch script itself", "Fix:")


def test_dry_run_from_the_config_cannot_start_the_server(target_data):
    """The issue's exploit: extra_env DRY_RUN = "0" made `DRY_RUN=1 bash launch/...` start vLLM."""
    data = target_data("h200")
    data["server"]["extra_env"] = {"DRY_RUN": "0", "PYTHON": "/bin/evil", "HF_HUB_OFFLINE": "0"}
    _refused(data, "server.extra_env.DRY_RUN")


def test_reserved_names_cover_everything_the_plan_sets_and_the_script_reads(target_data):
    """If launch_plan() or the template learns a new variable, it must be reserved here too."""
    data = target_data("gb10")
    data["server"]["allow_long_max_model_len"] = True
    data["ple"]["ready_timeout_s"] = 900
    configs = [load_target(n) for n in ("gb10", "cmp170hx-x2", "h200", "cpu-smoke")]
    configs += [parse_config(data, source="all-branches"), fork_preview(target_data)]
    emitted, read = set(), set()
    for cfg in configs:
        plan = launch_plan(cfg)
        emitted |= {e.name for e in plan.env if e.name not in cfg.server.extra_env} | {r.env for r in plan.required}
        script = render_launch(cfg=cfg, plan=plan)[LAUNCH_SCRIPT_NAME]
        read |= set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", script))
    assert {"VLLM_PLE_MMAP_TABLE", "VLLM_ENGINE_READY_TIMEOUT_S", "CUTE_DSL_ARCH", MODEL_DIR_ENV} <= emitted
    assert emitted <= LAUNCH_RESERVED_ENV, emitted - LAUNCH_RESERVED_ENV
    assert read <= LAUNCH_RESERVED_ENV, read - LAUNCH_RESERVED_ENV


@pytest.mark.parametrize("name", ["FOO\n", "FOO BAR", "1FOO", "FOO=1", "", "FÖÖ"])
def test_env_names_must_be_whole_shell_names(target_data, name):
    data = target_data("h200")
    data["server"]["extra_env"] = {name: "1"}
    _refused(data, "server.extra_env", "not a valid shell variable name")


def test_unreserved_extra_env_still_renders(target_data):
    data = target_data("h200")
    data["server"]["extra_env"] = {"NCCL_DEBUG": "INFO", "VLLM_LOGGING_LEVEL": "DEBUG"}
    cfg = parse_config(data, source="t.toml")
    assert "export NCCL_DEBUG=INFO" in render_launch(cfg=cfg, plan=launch_plan(cfg))[LAUNCH_SCRIPT_NAME]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model.served_name", "qwen\x00x"),
        ("model.served_name", "qwen\nx"),
        ("target.description", "line one\rline two"),
        ("model.revision", "main\x1b[31m"),
        ("patches.reason", "tab\there"),
        ("model.base_model", "Qwen/x\u2028y"),
        ("server.extra_args", ["--foo\x00"]),
        ("server.extra_env", {"NCCL_DEBUG": "INFO\x00"}),
        ("server.host", "0.0.0.0\x7f"),
    ],
    ids=["nul", "newline", "cr", "escape", "tab", "line-separator", "arg-nul", "env-value-nul", "del"],
)
def test_control_characters_are_refused_in_every_string(target_data, field, value):
    data = target_data("h200")
    section, key = field.split(".")
    data.setdefault(section, {})[key] = value
    if field == "patches.reason":
        data["patches"]["apply"] = True
    _refused(data, field, "control character", "Fix:")


def test_a_nul_in_served_name_used_to_render_a_script_bash_refuses(target_data, tmp_path):
    """Why the rule exists: the rendered script held a NUL and bash would not run it."""
    cfg = load_target("h200")
    bad = cfg.model_copy(update={"model": cfg.model.model_copy(update={"served_name": "qwen\x00x"})})
    script = tmp_path / "run.sh"
    script.write_text(render_launch(cfg=bad, plan=launch_plan(bad))[LAUNCH_SCRIPT_NAME])
    assert b"\x00" in script.read_bytes()
    data = target_data("h200")
    data["model"]["served_name"] = "qwen\x00x"
    _refused(data, "model.served_name", "U+0000")


@pytest.mark.parametrize(
    "ref",
    ["", "vllm/vllm-openai@", "vllm/vllm-openai@sha256:", "vllm/vllm-openai@sha256:abc",
     "vllm/vllm-openai@sha256:" + "A" * 64, "vllm/vllm-openai@md5:" + "a" * 32,
     "vllm/vllm-openai@sha256:" + "a" * 64 + "@sha256:" + "a" * 64, "@sha256:" + "a" * 64, "vllm openai:1"],
    ids=["empty", "at-nothing", "no-hex", "short", "upper", "md5", "two-digests", "no-name", "space"],
)
def test_a_base_image_that_only_looks_pinned_is_refused(target_data, ref):
    data = target_data("h200")
    data["target"]["base_image"] = ref
    _refused(data, "target.base_image", "Fix:")


def test_well_formed_base_images_load(target_data):
    for ref in ("vllm/vllm-openai:v0.33.0", "127.0.0.1:5000/qfn-base:bookworm@sha256:" + "0" * 64, "ubuntu@sha256:" + "f" * 64):
        data = target_data("h200")
        data["target"]["base_image"] = ref
        parse_config(data, source="t.toml")


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("target.host_ram_gib", float("inf"), "finite number"),
        ("target.host_ram_gib", float("nan"), "finite number"),
        ("target.gpu_memory_gib", float("inf"), "finite number"),
        ("server.gpu_memory_utilization", float("nan"), "finite number"),
        ("server.port", "8000", "valid integer"),
        ("server.max_model_len", 8192.0, "valid integer"),
        ("server.enforce_eager", "yes", "valid boolean"),
        ("server.enforce_eager", 1, "valid boolean"),
        ("ple.present", "true", "valid boolean"),
        ("target.gpu_count", True, "valid integer"),
        ("server.extra_args", "--foo", "valid list"),
    ],
)
def test_coerced_and_non_finite_values_are_refused(target_data, field, value, said):
    data = target_data("h200")
    section, key = field.split(".")
    data.setdefault(section, {})[key] = value
    _refused(data, field, said)


def test_inf_host_ram_in_a_toml_file_is_refused(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text((TARGETS_DIR / "gb10.toml").read_text().replace("host_ram_gib = 121", "host_ram_gib = inf"))
    assert "host_ram_gib = inf" in path.read_text()
    with pytest.raises(ConfigError, match="target.host_ram_gib: Input should be a finite number"):
        load_target(path)


def test_shipped_targets_still_load_and_render():
    for name in ("gb10", "cmp170hx-x2", "h200", "cpu-smoke"):
        cfg = load_target(name)
        script = render_launch(cfg=cfg, plan=launch_plan(cfg))[LAUNCH_SCRIPT_NAME]
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


BIDI = ["\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]


@pytest.mark.parametrize("char", BIDI, ids=[f"U+{ord(c):04X}" for c in BIDI])
def test_bidi_controls_are_refused_in_a_description(target_data, char):
    data = target_data("h200")
    data["target"]["description"] = f"H200 {char}host"
    _refused(data, "target.description", "bidirectional control character", f"U+{ord(char):04X}", "Fix:")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model.served_name", "qwen\u202ex"),
        ("patches.reason", "safe\u2066 text"),
        ("server.extra_args", ["--foo\u202d"]),
        ("server.extra_env", {"NCCL_DEBUG": "INFO\u2067"}),
    ],
    ids=["served-name", "reason", "arg", "env-value"],
)
def test_bidi_controls_are_refused_in_every_string(target_data, field, value):
    data = target_data("h200")
    section, key = field.split(".")
    data.setdefault(section, {})[key] = value
    _refused(data, field, "bidirectional control character")


def test_a_bidi_override_in_a_description_used_to_reach_the_launch_script(target_data):
    """Why the rule exists: U+202E in the description was rendered into the script's header."""
    cfg = load_target("h200")
    bad = cfg.model_copy(update={"target": cfg.target.model_copy(update={"description": "H200 \u202eevil"})})
    assert "\u202e" in render_launch(cfg=bad, plan=launch_plan(bad))[LAUNCH_SCRIPT_NAME]
    data = target_data("h200")
    data["target"]["description"] = "H200 \u202eevil"
    _refused(data, "target.description", "U+202E (RIGHT-TO-LEFT OVERRIDE)")


_LOCK = "docker/locks/vllm-0.33.0-linux-arm64.txt"


@pytest.mark.parametrize(
    "lock",
    [f"/work/{_LOCK}", f"/{_LOCK}@sha256:" + "a" * 64, f"../{_LOCK}", f"docker/../../elsewhere/{_LOCK}",
     "docker/locks/../../../tmp/vllm-0.33.0-linux-arm64.txt@sha256:" + "b" * 64],
    ids=["absolute", "absolute-pinned", "parent", "climbs-inside", "climbs-pinned"],
)
def test_a_base_lock_outside_the_repository_is_refused(target_data, lock):
    data = target_data("gb10")
    data["target"]["base_lock"] = lock
    _refused(data, "target.base_lock", "outside the repository", f"e.g. {_LOCK}", "Fix:")


def test_a_base_lock_inside_the_repository_loads(target_data):
    data = target_data("gb10")
    data["target"]["base_lock"] = f"./{_LOCK}"
    assert parse_config(data, source="t.toml").target.base_lock_path == f"./{_LOCK}"
