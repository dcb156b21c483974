"""The amd64 GPU image built end to end here (h200): base from the engine lock, the patch series
applied to the installed engine, kernels AOT-compiled by the image's own Triton, labels, the
in-image self-check and the `vllm` command; then the self-check refusing a bad launch inside the real image.

One build takes most of an hour on the 2-core CI machine (the lock base alone installs ~10 GB), so
these tests carry the `gpu_image` marker, which `make test` deselects; `make test-gpu-image` runs
them, and evidence/images/ holds the logs of the builds they make.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from docker.errors import ImageNotFound

from builder.config import load_target, parse_config
from builder.constants import QFN_LABEL_PREFIX
from builder.errors import SelfCheckError
from builder.image import build_image
from builder.image.recipe import image_tag
from tests.prefetch import HOST_CA

pytestmark = [pytest.mark.docker, pytest.mark.gpu_image, pytest.mark.timeout(4 * 3600)]


@pytest.fixture(scope="session")
def h200_image(docker_client):
    cfg = load_target("h200")
    ca = HOST_CA if HOST_CA.is_file() else None
    return cfg, build_image(cfg=cfg, ca_bundle=ca)


def test_h200_image_carries_the_patched_engine_kernels_and_labels(h200_image):
    cfg, built = h200_image
    labels = built.labels
    assert labels[f"{QFN_LABEL_PREFIX}.base.source"] == "wheel-lock"
    assert labels[f"{QFN_LABEL_PREFIX}.base.lock"] == cfg.target.base_lock
    assert labels[f"{QFN_LABEL_PREFIX}.engine"] == "vllm==0.33.0"
    assert re.fullmatch(r"[0-9a-f]{64}", labels[f"{QFN_LABEL_PREFIX}.patch-series.sha256"])
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    assert built.kernel_report is not None and built.kernel_report.is_file()
    assert "== self-check passed" in (built.selfcheck_output or "")


def _run(image: str, *args: str, mounts: list[str] = (), env: list[str] = ()) -> subprocess.CompletedProcess[str]:
    cmd = ["docker", "run", "--rm", "--network", "none"]
    for m in mounts:
        cmd += ["-v", m]
    for e in env:
        cmd += ["-e", e]
    return subprocess.run([*cmd, image, *args], capture_output=True, text=True, check=False)


def test_selfcheck_is_a_command_on_the_built_image(h200_image):
    _, built = h200_image
    proc = _run(built.tag, "qfn-selfcheck")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok   scale views (BLNHC)" in proc.stdout and "ok   create_engine_config" in proc.stdout
    assert "speculative mtp k=4" in proc.stdout


def test_vllm_command_prints_the_engine_version_the_labels_name(h200_image, docker_client):
    """`docker run IMAGE vllm --version` reaches vLLM's CLI through the entrypoint, and the CLI finds
    the lock's `vllm` wheel by its metadata. vLLM 0.33.0 builds its parser's defaults for a device
    ("Failed to infer device type" without one), so a host without a GPU names the CPU platform; a
    host with docker's nvidia runtime gives the container its GPUs instead."""
    _, built = h200_image
    label = built.labels[f"{QFN_LABEL_PREFIX}.vllm-version"]
    assert label == built.labels[f"{QFN_LABEL_PREFIX}.engine"].removeprefix("vllm==")
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        proc = subprocess.run(["docker", "run", "--rm", "--gpus", "all", built.tag, "vllm", "--version"],
                              capture_output=True, text=True, check=False)
    else:
        proc = _run(built.tag, "vllm", "--version", env=["VLLM_TARGET_DEVICE=cpu"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == label


def test_a_target_with_a_misspelled_flag_is_refused_by_the_build(h200_image, target_data, tmp_path, docker_client):
    """Same base and stage-1 layers (cached), a launch with a typo: the self-check stops the build and
    no image is tagged."""
    data = target_data("h200")
    data["target"]["name"] = "h200-typo-test"
    data["server"]["extra_args"] = ["--max-num-seqz", "8"]
    cfg = parse_config(data, source="h200 with a typo")
    with pytest.raises(SelfCheckError) as err:
        build_image(cfg=cfg, ca_bundle=HOST_CA if HOST_CA.is_file() else None)
    assert "unrecognized arguments: --max-num-seqz" in err.value.message
    with pytest.raises(ImageNotFound):  # neither the final tag nor a candidate is left behind
        docker_client.images.get(image_tag(cfg))
    assert not [t for i in docker_client.images.list(name="qfn-int8kv") for t in i.tags if t.startswith(image_tag(cfg))]
