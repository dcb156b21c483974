"""Launch lint: the rendered launch command through vLLM 0.33.0's own parser and config builders.

The command is what the image's launch script prints with DRY_RUN=1 (rendered from the target's
launch_plan()), so the lint checks the exact words the server would get. It is parsed by the
engine's OpenAI-server parser, validated as `vllm serve` validates it, turned into engine args,
and then into the whole VllmConfig the engine would build at start-up: model, cache, parallel,
speculative (MTP draft config), engram and scheduler configs with their validators, and the
model's own verify_and_update_config. The model is a small synthetic config.json with
Qwen4Exp's architecture fields and a small tokenizer; the GPU the platform reports is the
target's (arch, count, memory), the one fact no CPU host has (the model's modules are imported as
the host sees them, and the driver-linked CUDA ops library is stood in for: see _install_platform).
Any refusal is reported with the engine's own message.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: A small Qwen4Exp text model: 3 Gated DeltaNet layers + 1 QSA layer, PLE on two linear layers,
#: one MTP layer; the QSA indexer budget / compress ratio give the 512-wide top-k the compiled
#: cooperative_topk supports (512, 1024 or 2048).
SYNTHETIC_CONFIG: dict = {
    "architectures": ["Qwen4ExpForCausalLM"],
    "model_type": "qwen4_exp_text",
    "torch_dtype": "bfloat16",
    "vocab_size": 49152,
    "hidden_size": 512,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "hidden_act": "silu",
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 8,
    "moe_intermediate_size": 256,
    "shared_expert_intermediate_size": 256,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "hc_count": 4,
    "hc_lowrank": 32,
    "ple_layer_ids": [1, 2],
    "ple_embed_dim": 512,
    "ngram_size": 3,
    "heads_per_ngram": 8,
    "ngram_vocab_size_base": 4096,
    "split_ngram_parts": 1,
    "indexer_n_heads": 4,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 128,
    "indexer_budget": 2048,
    "indexer_compress_ratio": 4,
    "mtp_num_hidden_layers": 1,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}


@dataclass(frozen=True)
class TargetGpu:
    """What the platform reports: the target's GPU, from the image's selfcheck target file."""

    name: str
    arch: str  # sm_90
    count: int
    memory_gib: float

    @property
    def capability(self) -> tuple[int, int]:
        digits = self.arch.removeprefix("sm_")
        return int(digits[:-1]), int(digits[-1])


class LintFailed(Exception):
    """The engine refused the launch command; the message is the engine's own."""

    def __init__(self, stage: str, message: str) -> None:
        self.stage = stage
        self.message = message
        super().__init__(f"{stage}: {message}")


@dataclass
class LintResult:
    argv: list[str]
    env: dict[str, str]
    stages: list[tuple[str, str]]


#: Special tokens the launch needs from the tokenizer: chat markers, and the think markers the
#: qwen3 reasoning parser looks up when the engine config is built.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")


def _tokenizer_json() -> dict:
    """A small word-level tokenizer in the `tokenizers` serialization (no engine code needed to write it)."""
    words = [*SPECIAL_TOKENS, *"abcdefghijklmnopqrstuvwxyz0123456789.,!?", "the", "a", "is", "qwen"]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
            for i, t in enumerate(SPECIAL_TOKENS)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(words)}, "unk_token": "<|endoftext|>"},
    }


def write_synthetic_model(directory: Path) -> Path:
    """config.json with Qwen4Exp's architecture fields and a small real tokenizer; no weights (the lint
    builds configs, it never loads a model)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(SYNTHETIC_CONFIG, indent=2) + "\n")
    (directory / "tokenizer.json").write_text(json.dumps(_tokenizer_json()) + "\n")
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                    "bos_token": None, "unk_token": "<|endoftext|>", "model_max_length": 262144})
        + "\n"
    )  # fmt: skip
    return directory


def rendered_command(
    *, launch_script: Path, model_dir: Path, dirs: dict[str, Path] | None = None
) -> tuple[list[str], dict[str, str]]:
    """argv and exported env that the launch script would exec (its DRY_RUN=1 output); ``dirs``:
    the other folders the script requires (name -> folder)."""
    inputs = {"MODEL_DIR": str(model_dir), **{name: str(path) for name, path in (dirs or {}).items()}}
    env = {k: v for k, v in os.environ.items() if k != "DRY_RUN" and k not in inputs}
    proc = subprocess.run(
        ["bash", str(launch_script)], env=env | inputs | {"DRY_RUN": "1"}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise LintFailed("launch script", (proc.stderr or proc.stdout).strip())
    exported: dict[str, str] = {}
    argv: list[str] | None = None
    for line in proc.stdout.splitlines():
        words = shlex.split(line)
        if words and words[0] == "export" and len(words) == 2 and "=" in words[1]:
            key, _, value = words[1].partition("=")
            exported[key] = value
        elif len(words) >= 3 and words[1] == "-m":
            argv = words
    if argv is None:
        raise LintFailed("launch script", f"printed no command with DRY_RUN=1:\n{proc.stdout}")
    return argv, exported


#: Engine extension libraries that vllm/platforms/cuda.py imports and that link libcuda.so.1, the
#: driver, which exists only with a GPU.
DRIVER_LINKED_MODULES = ("vllm._C_stable_libtorch",)
#: The model's package and the classes the launch uses (the model, its MTP draft), imported before
#: the platform is set (see _install_platform).
MODEL_PACKAGE = "vllm.models.qwen4_exp"
MODEL_CLASSES = ("Qwen4ExpForCausalLM", "Qwen4ExpMTP")


def _without_driver() -> list[str]:
    """Without a GPU the driver library is absent, so the engine's CUDA extension libraries cannot
    load, and vllm/platforms/cuda.py and the attention imports need them. Each one that fails for
    that reason (and only that) gets an empty module in its place: they hold kernels, and no config
    builder calls a kernel. Returns the names stood in for."""
    import importlib
    import sys
    import types

    stood_in = []
    for name in DRIVER_LINKED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if "libcuda" not in str(exc):
                continue  # absent from this build (fa3 on some arches): the engine copes, as on a GPU host
            sys.modules[name] = types.ModuleType(name)
            stood_in.append(name)
    return stood_in


def _install_platform(gpu: TargetGpu) -> str | None:
    """Make vLLM's current_platform the target's CUDA GPU for the config builders.

    The model's modules are imported first, as this host's own platform detection sees them (no
    GPU): imported under a CUDA platform they would load the flash-attention and CUTLASS kernel
    libraries, which need the driver; the model class is then inspected in-process. Everything built
    after that (DeviceConfig, CacheConfig,
    SpeculativeConfig, VllmConfig with the platform's check_and_update_config) sees the target's GPU.
    """
    import importlib

    package = importlib.import_module(MODEL_PACKAGE)
    for name in MODEL_CLASSES:
        getattr(package, name)
    stood_in = _without_driver()
    note = f"no driver (libcuda.so.1): {', '.join(stood_in)} not loaded, kernels only" if stood_in else None
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    major, minor = gpu.capability

    class TargetCudaPlatform(CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(major=major, minor=minor)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return f"{gpu.name} ({gpu.arch}, self-check: no GPU present)"

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return int(gpu.memory_gib * (1 << 30))

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:
            return False

        @classmethod
        def device_count(cls) -> int:
            return gpu.count

        @classmethod
        def log_warnings(cls) -> None:
            return None

    host = type(platforms._current_platform).__name__ if platforms._current_platform is not None else "unresolved"
    platforms._current_platform = TargetCudaPlatform()
    # vLLM inspects a model class in a subprocess only to keep CUDA uninitialized in this one; that
    # subprocess would import the model under a CUDA platform again (kernel libraries, driver).
    # The class is already imported here, on the host's platform, so inspect it in-process.
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda fn: fn()
    return f"model modules imported on the host platform ({host})" + (f"; {note}" if note else "")


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _engine_message(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def lint_argv(*, argv: list[str], env: dict[str, str], gpu: TargetGpu) -> LintResult:
    """Parse, validate and build the engine config of ``argv`` (``python3 -m MODULE --model ...``)."""
    stages: list[tuple[str, str]] = []
    with _env(env | {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}):
        note = _install_platform(gpu)
        stages.append(("platform", f"CUDA {gpu.arch} x{gpu.count}, {gpu.memory_gib:g} GiB (the target's GPU)" + (f"; {note}" if note else "")))
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
        from vllm.usage.usage_lib import UsageContext
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(argv[3:])
        except SystemExit as exc:  # argparse reports on stderr and exits 2
            raise LintFailed("vLLM CLI parser", err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}") from None
        stages.append(("vLLM CLI parser", f"{len(argv) - 3} words parsed by vllm.entrypoints.common.cli_args.make_arg_parser"))
        try:
            validate_parsed_serve_args(args)
        except Exception as exc:
            raise LintFailed("validate_parsed_serve_args", _engine_message(exc)) from None
        stages.append(("validate_parsed_serve_args", "ok"))
        try:
            engine_args = AsyncEngineArgs.from_cli_args(args)
        except Exception as exc:
            raise LintFailed("AsyncEngineArgs.from_cli_args", _engine_message(exc)) from None
        stages.append(("AsyncEngineArgs.from_cli_args", "ok"))
        try:
            config = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        except Exception as exc:
            raise LintFailed("create_engine_config", _engine_message(exc)) from None
        stages.append(("create_engine_config", _summary(config)))
    return LintResult(argv=argv, env=env, stages=stages)


def _summary(config) -> str:
    spec = config.speculative_config
    engram = getattr(config, "engram_config", None)
    return (
        f"model {config.model_config.architecture}, max_model_len {config.model_config.max_model_len}; "
        f"cache dtype {config.cache_config.cache_dtype}, block size {config.cache_config.block_size}; "
        f"TP {config.parallel_config.tensor_parallel_size} executor {config.parallel_config.distributed_executor_backend}; "
        f"speculative {getattr(spec, 'method', None)} k={getattr(spec, 'num_speculative_tokens', None)}; "
        f"engram cpu_offload={getattr(engram, 'cpu_offload', None)}"
    )


def lint_launch(*, launch_script: Path, gpu: TargetGpu, launch_dirs: tuple[str, ...] = ()) -> LintResult:
    """``launch_dirs``: folders the launch requires besides MODEL_DIR, given as empty temp dirs."""
    with tempfile.TemporaryDirectory(prefix="qfn-lint-model-") as tmp:
        model = write_synthetic_model(Path(tmp) / "model")
        dirs = {name: Path(tmp) / name for name in launch_dirs}
        for path in dirs.values():
            path.mkdir()
        argv, env = rendered_command(launch_script=launch_script, model_dir=model, dirs=dirs)
        return lint_argv(argv=argv, env=env, gpu=gpu)
