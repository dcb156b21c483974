"""The launch lint against the real, patched vllm==0.33.0 (the amd64 engine lock installed in a
venv, the series applied, with the add-on locks over it): every GPU target's rendered command passes vLLM's own parser and config
builders, and a misspelled flag, a key the speculative config rejects, or an out-of-range value is
refused with the engine's own message. The same lint runs inside every GPU image
(tests/image/test_gpu_image.py).

The venv is made once per lock and series (~4 GB of wheels, downloaded into the base builds' wheel
cache ~/.cache/qfn-int8kv/wheels/amd64 unless there already; ~9 GB installed, in ~/.cache/qfn-int8kv/lint-venv).
"""

from __future__ import annotations

import os
import tomllib
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from builder.config import parse_config
from builder.constants import TARGETS_DIR
from builder.errors import SelfCheckError
from builder.image.lintenv import lint_target

pytestmark = [pytest.mark.engine_lint, pytest.mark.timeout(1800)]

GPU_TARGETS = ["gb10", "gb10-x2", "cmp170hx-x2", "h200"]

#: (target, extra_args) of each refusal below, by the test that asserts it.
REFUSALS = {
    "test_a_misspelled_flag_is_refused": ("h200", ["--max-num-seqz", "8"]),
    "test_a_bad_speculative_config_key_is_refused": (
        "gb10", ["--speculative-config", '{"method":"mtp","num_speculative_tokens":4,"num_spec_tokenz":2}']),
    "test_an_out_of_range_value_is_refused": ("h200", ["--gpu-memory-utilization", "1.5"]),
}


def _config(name: str, extra: list[str] | None = None):
    data = tomllib.loads((TARGETS_DIR / f"{name}.toml").read_text())
    if extra is not None:
        data.setdefault("server", {})["extra_args"] = extra
    return parse_config(data, source=name if extra is None else f"{name} + extra_args {extra}")


def _case(item) -> str | None:
    """The lint case a collected test of this module asserts on."""
    callspec = getattr(item, "callspec", None)
    return callspec.params["name"] if callspec else item.originalname if item.originalname in REFUSALS else None


@pytest.fixture(scope="module")
def linted(request, prefetch):
    """Each selected case's lint, run side by side: a lint is one process importing the engine, ~20 s of
    one core each, and the cases are independent. The venv (ensure_lint_venv) was started in the
    background when the run began (tests/prefetch.py)."""
    python = prefetch.result("lint_venv")
    cases = {c for item in request.session.items if item.module is request.module and (c := _case(item))}
    configs = {c: _config(*REFUSALS[c]) if c in REFUSALS else _config(c) for c in sorted(cases)}
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures: dict[str, Future] = {c: pool.submit(lint_target, cfg=cfg, python=python) for c, cfg in configs.items()}
    return futures


@pytest.mark.parametrize("name", GPU_TARGETS)
def test_every_gpu_target_passes_the_engines_own_parser_and_config(linted, name):
    cfg = _config(name)
    out = linted[name].result()
    assert "ok   vLLM CLI parser" in out
    assert "ok   create_engine_config" in out
    assert "speculative mtp k=4" in out  # the MTP draft config was built, not skipped
    assert "cache dtype int8_per_token_head" in out
    # A multi-host target's Ray executor is built too: Ray comes from its add-on lock, in the lint venv as in the image.
    assert (f"TP {cfg.parallel.tensor_parallel_size} executor ray" in out) == (cfg.cluster.nodes > 1)


def _refusal(linted, request) -> str:
    with pytest.raises(SelfCheckError) as err:
        linted[request.node.originalname].result()
    return err.value.message


def test_a_misspelled_flag_is_refused(linted, request):
    message = _refusal(linted, request)
    assert "vLLM CLI parser" in message
    assert "unrecognized arguments: --max-num-seqz" in message  # the engine's argparse


def test_a_bad_speculative_config_key_is_refused(linted, request):
    assert "num_spec_tokenz" in _refusal(linted, request)


def test_an_out_of_range_value_is_refused(linted, request):
    message = _refusal(linted, request)
    assert "gpu_memory_utilization" in message or "gpu-memory-utilization" in message
