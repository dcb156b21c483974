"""What the served model is, as far as its KV cache and recurrent state go.

Facts come from a checkpoint's ``config.json`` (``--model-dir``) or, without a snapshot, from
the data file ``builder/plan/architectures/<served_name>.toml``, which holds the same keys plus
the source of every value. Defaults for keys a config.json may omit are the ones the
pinned engine uses (transformers ``Qwen4ExpTextConfig``; vLLM's ``getattr`` fallbacks).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from builder.constants import ARCHITECTURES_DIR, REPO_ROOT
from builder.errors import ConfigError

ModelDtype = Literal["bfloat16", "float16", "float32"]

#: config.json layer types that are QSA attention layers (transformers renames full_attention).
QSA_LAYER_TYPES = ("indexed_attention", "full_attention", "qwen_sparse_attention")
LINEAR_LAYER_TYPE = "linear_attention"
#: transformers Qwen4ExpTextConfig: every 4th layer is attention when layer_types is absent.
DEFAULT_FULL_ATTENTION_INTERVAL = 4
#: transformers Qwen4ExpTextConfig defaults for keys a config.json may leave out.
QWEN4_EXP_DEFAULTS: dict[str, Any] = {
    "hidden_size": 2048,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "hc_count": 4,
    "ple_conv_kernel_size": 4,
    "ngram_size": 3,
    # vLLM's Qwen4Exp MTP module: getattr(config, "mtp_num_hidden_layers", 1).
    "mtp_num_hidden_layers": 1,
}
DENSE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


class _Facts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QSAIndexer(_Facts):
    """The QSA indexer's own caches: compressed keys (one row per group) and a raw-key ring."""

    head_dim: int = Field(gt=0, description="indexer_head_dim: width of the indexer keys (stored bf16).")
    compress_ratio: int = Field(gt=0, description="indexer_compress_ratio: tokens per compressed key.")


class GatedDeltaNet(_Facts):
    """Gated DeltaNet (linear attention) layers: a fixed-size state per request, no per-token KV."""

    layers: int = Field(ge=0)
    num_key_heads: int = Field(gt=0)
    num_value_heads: int = Field(gt=0)
    key_head_dim: int = Field(gt=0)
    value_head_dim: int = Field(gt=0)
    conv_kernel: int = Field(gt=0)
    ssm_dtype: ModelDtype = Field(description="Dtype of the recurrent (temporal) state.")


class PerLayerEmbedding(_Facts):
    """PLE short-conv state (the n-gram table itself lives on the host)."""

    layers: int = Field(ge=0, description="Decoder layers with a PLE module (ple_layer_ids).")
    hidden_size: int = Field(gt=0)
    hc_count: int = Field(gt=0)
    conv_kernel: int = Field(gt=0)
    ngram_size: int = Field(gt=0)


class ModelArchitecture(_Facts):
    """The facts that size the KV cache and the recurrent state of one model."""

    name: str
    source: str = Field(description="Where the facts came from: a data file or a snapshot's config.json.")
    family: Literal["qwen4_exp", "dense"]
    dtype: ModelDtype = Field(description="Checkpoint dtype (config.json dtype / torch_dtype).")
    max_position_embeddings: int = Field(gt=0)
    attention_layers: int = Field(gt=0, description="Layers with a per-token KV cache (QSA or dense attention).")
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    indexer: QSAIndexer | None = None
    gdn: GatedDeltaNet | None = None
    ple: PerLayerEmbedding | None = None
    mtp_layers: int = Field(default=0, ge=0, description="MTP draft layers (QSA layers) when speculating.")
    sources: dict[str, str] = Field(default_factory=dict, description="Key -> where its value comes from.")

    @property
    def hybrid(self) -> bool:
        return self.gdn is not None


class Estimate(_Facts):
    """A budget term this project could not measure, with the reasoning behind its value."""

    bytes: int = Field(ge=0)
    source: str


class BudgetEstimates(_Facts):
    """Per-model memory terms the planner estimates when no snapshot or measurement says better."""

    gpu_weight_bytes: Estimate | None = Field(default=None, description="Weights resident on the GPUs, all ranks.")
    runtime_reserve_bytes: Estimate | None = Field(
        default=None, description="Peak activation of vLLM's profiling run plus non-torch memory, per GPU."
    )
    cuda_graph_bytes: Estimate | None = Field(default=None, description="CUDA-graph pool, per GPU (0 when eager).")


class ArchitectureFile(_Facts):
    """A parsed builder/plan/architectures/<name>.toml."""

    architecture: ModelArchitecture
    estimates: BudgetEstimates


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, dict) else config


def _need(cfg: dict[str, Any], key: str, source: str) -> Any:
    if cfg.get(key) is None:
        raise ConfigError(f"{source}: config key {key!r} is missing", hint=f"add {key} to the model config")
    return cfg[key]


def _layer_counts(cfg: dict[str, Any], source: str) -> tuple[int, int]:
    """(attention layers, linear-attention layers) from layer_types or the default interval."""
    layers = int(_need(cfg, "num_hidden_layers", source))
    types = cfg.get("layer_types")
    if types is None:
        interval = int(cfg.get("full_attention_interval", DEFAULT_FULL_ATTENTION_INTERVAL))
        types = [LINEAR_LAYER_TYPE if (i + 1) % interval else "indexed_attention" for i in range(layers)]
    unknown = sorted(set(types) - {LINEAR_LAYER_TYPE, *QSA_LAYER_TYPES})
    if unknown or len(types) != layers:
        raise ConfigError(
            f"{source}: layer_types {unknown or types} does not describe {layers} QSA/linear layers",
            hint="layer_types must list num_hidden_layers entries of linear_attention or indexed_attention",
        )
    linear = sum(t == LINEAR_LAYER_TYPE for t in types)
    return layers - linear, linear


def _dtype(cfg: dict[str, Any], source: str) -> str:
    value = cfg.get("dtype") or cfg.get("torch_dtype")
    if value is None:
        raise ConfigError(f"{source}: config key 'dtype' (or 'torch_dtype') is missing", hint="add the checkpoint dtype")
    return str(value)


def architecture_from_config(config: dict[str, Any], *, name: str, source: str, sources: dict[str, str] | None = None) -> ModelArchitecture:
    """Parse a Hugging Face config (config.json or a data file's [config]) into the facts."""
    cfg = _text_config(config)
    model_type = str(_need(cfg, "model_type", source))
    try:
        if model_type.startswith("qwen4_exp"):
            arch = _qwen4_exp(cfg, name=name, source=source, sources=sources or {})
        elif model_type in DENSE_MODEL_TYPES:
            arch = _dense(cfg, name=name, source=source, sources=sources or {})
        else:
            raise ConfigError(
                f"{source}: model_type {model_type!r} is not one the planner models",
                hint=f"the planner knows qwen4_exp (QSA + Gated DeltaNet) and {', '.join(DENSE_MODEL_TYPES)}",
            )
    except ValidationError as exc:
        raise ConfigError(f"{source}: invalid model config: {exc}", hint="check the config values") from exc
    return arch


def _qwen4_exp(cfg: dict[str, Any], *, name: str, source: str, sources: dict[str, str]) -> ModelArchitecture:
    if cfg.get("indexer_n_heads") is None:
        raise ConfigError(
            f"{source}: indexer_n_heads is not set, so the attention layers are not QSA",
            hint="the planner models the QSA path of qwen4_exp; give a QSA checkpoint's config",
        )
    get = lambda key: cfg.get(key, QWEN4_EXP_DEFAULTS.get(key))  # noqa: E731
    attention, linear = _layer_counts(cfg, source)
    dtype = _dtype(cfg, source)
    return ModelArchitecture(
        name=name,
        source=source,
        family="qwen4_exp",
        dtype=dtype,
        max_position_embeddings=_need(cfg, "max_position_embeddings", source),
        attention_layers=attention,
        num_attention_heads=_need(cfg, "num_attention_heads", source),
        num_key_value_heads=_need(cfg, "num_key_value_heads", source),
        head_dim=_need(cfg, "head_dim", source),
        indexer=QSAIndexer(
            head_dim=_need(cfg, "indexer_head_dim", source),
            compress_ratio=_need(cfg, "indexer_compress_ratio", source),
        ),
        gdn=GatedDeltaNet(
            layers=linear,
            num_key_heads=get("linear_num_key_heads"),
            num_value_heads=get("linear_num_value_heads"),
            key_head_dim=get("linear_key_head_dim"),
            value_head_dim=get("linear_value_head_dim"),
            conv_kernel=get("linear_conv_kernel_dim"),
            # vLLM's Qwen3.5 hybrid-cache contract: mamba_ssm_dtype, else the model dtype.
            ssm_dtype=cfg.get("mamba_ssm_dtype") or dtype,
        ),
        ple=PerLayerEmbedding(
            layers=len(set(cfg.get("ple_layer_ids") or [])),
            hidden_size=get("hidden_size"),
            hc_count=get("hc_count"),
            conv_kernel=get("ple_conv_kernel_size"),
            ngram_size=get("ngram_size"),
        ),
        mtp_layers=get("mtp_num_hidden_layers"),
        sources=sources,
    )


def _dense(cfg: dict[str, Any], *, name: str, source: str, sources: dict[str, str]) -> ModelArchitecture:
    heads = int(_need(cfg, "num_attention_heads", source))
    head_dim = cfg.get("head_dim") or int(_need(cfg, "hidden_size", source)) // heads
    return ModelArchitecture(
        name=name,
        source=source,
        family="dense",
        dtype=_dtype(cfg, source),
        max_position_embeddings=_need(cfg, "max_position_embeddings", source),
        attention_layers=_need(cfg, "num_hidden_layers", source),
        num_attention_heads=heads,
        num_key_value_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        sources=sources,
    )


def load_model_dir(model_dir: Path) -> ModelArchitecture:
    """The facts of a snapshot, from its config.json."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(f"--model-dir {model_dir}: no config.json there", hint="point it at a model snapshot folder")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}", hint="fix or re-download the snapshot's config.json") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: config.json must hold a JSON object", hint="re-download the snapshot's config.json")
    return architecture_from_config(config, name=Path(model_dir).name, source=display_path(path))


def display_path(path: Path) -> str:
    """Repo-relative when inside the checkout (stable in outputs), else as given."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)


def architecture_file_path(name: str, *, directory: Path = ARCHITECTURES_DIR) -> Path:
    return directory / f"{name}.toml"


def load_architecture_file(name: str, *, directory: Path = ARCHITECTURES_DIR) -> ArchitectureFile:
    """builder/plan/architectures/<name>.toml: [config] in config.json keys, [sources], [estimates]."""
    path = architecture_file_path(name, directory=directory)
    if not path.is_file():
        known = sorted(p.stem for p in directory.glob("*.toml"))
        raise ConfigError(
            f"no architecture file for model {name!r} ({path})",
            hint=f"pass --model-dir with the snapshot, or add {path.name} (known: {', '.join(known) or 'none'})",
        )
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", hint="fix the syntax at the line named") from exc
    config, sources = data.get("config"), data.get("sources", {})
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: no [config] table", hint="add the model's config.json keys under [config]")
    undocumented = sorted(set(config) - set(sources) - {"model_type"})
    if undocumented:
        raise ConfigError(
            f"{path}: config keys without a source: {undocumented}",
            hint="every fact needs its source under [sources] (where it was read, or why it is assumed)",
        )
    arch = architecture_from_config(config, name=name, source=display_path(path), sources=sources)
    try:
        estimates = BudgetEstimates.model_validate(data.get("estimates", {}))
    except ValidationError as exc:
        raise ConfigError(f"{path}: invalid [estimates]: {exc}", hint="each estimate needs bytes and source") from exc
    return ArchitectureFile(architecture=arch, estimates=estimates)
