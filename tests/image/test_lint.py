"""The launch lint against the real, patched vllm==0.33.0 (the amd64 engine lock installed in a
venv, the series applied, with the add-on locks over it): every GPU target's rendered command passes vLLM's own parser and config
builders, and a misspelled flag, a key the speculative config rejects, or an out-of-range value is
refused with the engine's own message. The same lint runs inside every GPU image
(tests/image/test_gpu_image.py).

The venv is made once per lock and series (~4 GB of wheels from PyPI, shared with the base build's
wheel cache; ~9 GB installed, in ~/.cache/qfn-int8kv/lint-venv).
"""

from __future__ import annotations

import pytest

from builder.config import parse_config
from builder.errors import SelfCheckError
from builder.image.lintenv import ensure_lint_venv, lint_target

pytestmark = [pytest.mark.engine_lint, pytest.mark.timeout(1800)]

GPU_TARGETS = ["gb10", "gb10-x2", "cmp170hx-x2", "h200"]


@pytest.fixture(scope="session")
def lint_python():
    return ensure_lint_venv()


def _with_extra_args(target_data, name: str, extra: list[str]):
    data = target_data(name)
    data.setdefault("server", {})["extra_args"] = extra
    return parse_config(data, source=f"{name} + extra_args {extra}")


@pytest.mark.parametrize("name", GPU_TARGETS)
def test_every_gpu_target_passes_the_engines_own_parser_and_config(target_data, lint_python, name):
    cfg = parse_config(target_data(name), source=name)
    out = lint_target(cfg=cfg, python=lint_python)
    assert "ok   vLLM CLI parser" in out
    assert "ok   create_engine_config" in out
    assert "speculative mtp k=4" in out  # the MTP draft config was built, not skipped
    assert "cache dtype int8_per_token_head" in out
    # A multi-host target's Ray executor is built too: Ray comes from its add-on lock, in the lint venv as in the image.
    assert (f"TP {cfg.parallel.tensor_parallel_size} executor ray" in out) == (cfg.cluster.nodes > 1)


def test_a_misspelled_flag_is_refused(target_data, lint_python):
    cfg = _with_extra_args(target_data, "h200", ["--max-num-seqz", "8"])
    with pytest.raises(SelfCheckError) as err:
        lint_target(cfg=cfg, python=lint_python)
    assert "vLLM CLI parser" in err.value.message
    assert "unrecognized arguments: --max-num-seqz" in err.value.message  # the engine's argparse


def test_a_bad_speculative_config_key_is_refused(target_data, lint_python):
    cfg = _with_extra_args(
        target_data, "gb10", ["--speculative-config", '{"method":"mtp","num_speculative_tokens":4,"num_spec_tokenz":2}']
    )
    with pytest.raises(SelfCheckError) as err:
        lint_target(cfg=cfg, python=lint_python)
    assert "num_spec_tokenz" in err.value.message


def test_an_out_of_range_value_is_refused(target_data, lint_python):
    cfg = _with_extra_args(target_data, "h200", ["--gpu-memory-utilization", "1.5"])
    with pytest.raises(SelfCheckError) as err:
        lint_target(cfg=cfg, python=lint_python)
    assert "gpu_memory_utilization" in err.value.message or "gpu-memory-utilization" in err.value.message
