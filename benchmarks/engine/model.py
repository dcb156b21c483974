"""A small but realistically shaped Qwen4Exp checkpoint with seeded random weights.

Attention is shaped like Qwen3.8-Flash-Next's (24 query heads, 2 KV heads, head_dim 256, QSA with
the real indexer budget 2048 / compress ratio 4, i.e. top-k 512, one the compiled
cooperative_topk supports), GDN layers between the QSA layers, a sparse MoE with a shared expert,
hyper-connections, one MTP layer, and PLE (per-layer n-gram embedding) on three GDN layers with a
~100 MB table instead of the real ~102 GB, laid out as the real checkpoint is (bf16 rows in
`split_ngram_parts` shards per layer), so the ple-mmap patch maps it in place from our safetensors.

Transformers' own Qwen4Exp model is built from the config and initialised by its `_init_weights`
(normal std = initializer_range = 0.02, zero-centred RMSNorm weights, so every norm scales by 1)
under a fixed seed, then saved with `save_pretrained`: the checkpoint is in the real model's HF
layout, which is what vLLM's loader reads. Transformers has no MTP module, so the MTP layer is
written beside it under the `mtp.` names vLLM's Qwen4ExpMTP loads, shaped after a QSA layer.

Runs where transformers knows qwen4_exp (>= 5.16; the H200 has 5.17). CLI:
  python -m benchmarks.engine.model --tokenizer DIR --out DIR [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.engine.errors import EngineHarnessError
from builder.atomic import replace_dir

#: Tokens the qwen3 reasoning parser of the h200 launch looks up; SmolLM2's tokenizer lacks them.
REASONING_TOKENS = ("<think>", "</think>")
#: Written last: its presence means the model dir is complete.
MARKER = "qfn-small-model.json"
#: Keep the generated PLE tables small: they are written in seconds and read through the page cache.
MAX_PLE_TABLE_BYTES = 512 << 20
#: The PLE table's dtype: the checkpoint's (config dtype), so vLLM maps the rows in place.
PLE_TABLE_DTYPE_BYTES = 2
#: Config keys of the PLE layers, as transformers' Qwen4ExpTextConfig and vLLM's PLE layer read them.
PLE_CONFIG_KEYS = (
    "ple_layer_ids", "ple_embed_dim", "ple_conv_kernel_size", "ngram_size", "heads_per_ngram",
    "ngram_vocab_size_base", "make_ngram_vocab_size_divisible_by", "split_ngram_parts",
)
#: Weights that transformers initialised with normal(0, initializer_range) have a std near it;
#: the MTP copy redraws those and keeps everything else (norms, A_log, dt_bias) as initialised.
_REDRAW_STD = (0.5, 2.0)


class SmallQwen4Exp(BaseModel):
    """The shape of the generated model; every field lands in config.json."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hidden_size: int = 1024
    num_hidden_layers: int = Field(8, description="Decoder layers; every qsa_every-th is QSA, the rest GDN.")
    qsa_every: int = 2
    num_attention_heads: int = 24
    num_key_value_heads: int = 2
    head_dim: int = 256
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10_000_000.0
    indexer_n_heads: int = Field(8, description="The most the upstream indexer prefill kernel fits on sm_90 "
                                 "(see indexer_prefill_smem); 16 failed there once prompts passed the budget.")
    indexer_kv_heads: int = 1
    indexer_head_dim: int = 128
    indexer_budget: int = 2048
    indexer_compress_ratio: int = 4
    linear_num_key_heads: int = 8
    linear_num_value_heads: int = 16
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    num_experts: int = 16
    num_experts_per_tok: int = 4
    moe_intermediate_size: int = 256
    shared_expert_intermediate_size: int = 512
    hc_count: int = 4
    hc_lowrank: int = 64
    mtp_num_hidden_layers: int = 1
    output_gate_type: str = Field(
        "silu", description="GDN output gate; transformers falls back to hidden_act when unset, but vLLM "
        "0.33.0's QwenGatedDeltaNetAttention asserts it is set (seen on the H200)."
    )
    max_position_embeddings: int = 262144
    initializer_range: float = 0.02
    vocab_pad: int = Field(128, description="vocab_size = tokenizer size rounded up to this.")
    ple_layer_ids: tuple[int, ...] = Field(
        (1, 3, 5), description="One-indexed decoder layers with a PLE module; GDN (linear_attention) layers only."
    )
    ple_embed_dim: int = Field(1024, description="Concatenated width of all n-gram heads; the table's row is "
                               "ple_embed_dim / ((ngram_size - 1) * heads_per_ngram) wide.")
    ple_conv_kernel_size: int = 4
    ngram_size: int = 3
    heads_per_ngram: int = 8
    ngram_vocab_size_base: int = Field(16384, description="The n-gram heads' row counts are the successive "
                                       "primes from this up (the real model: 20,000,000); it sizes the table.")
    make_ngram_vocab_size_divisible_by: int = 128
    split_ngram_parts: int = Field(512, description="Checkpoint shards per PLE table, as in the real checkpoint.")

    @property
    def layer_types(self) -> list[str]:
        # "full_attention" is what the real checkpoint writes; transformers maps it to its own
        # QSA name (qwen_sparse_attention before 5.18, indexed_attention after); vLLM takes both.
        return [
            "full_attention" if (i + 1) % self.qsa_every == 0 else "linear_attention"
            for i in range(self.num_hidden_layers)
        ]

    @property
    def topk(self) -> int:
        return self.indexer_budget // self.indexer_compress_ratio

    @property
    def ngram_heads(self) -> int:
        return (self.ngram_size - 1) * self.heads_per_ngram

    @property
    def ple_row_width(self) -> int:
        return self.ple_embed_dim // self.ngram_heads


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def ngram_head_sizes(spec: SmallQwen4Exp, *, dense_layer: int) -> list[int]:
    """Rows of each n-gram head of the `dense_layer`-th PLE layer: distinct primes after
    ngram_vocab_size_base - 1, numbered over all PLE layers' heads (transformers'
    Qwen4ExpTextNGramEmbedding and vLLM's Qwen4ExpNGramEmbedding._make_vocab_layout agree)."""
    sizes, prime = [], spec.ngram_vocab_size_base - 1
    for _ in range((dense_layer + 1) * spec.ngram_heads):
        prime += 1
        while not _is_prime(prime):
            prime += 1
        sizes.append(prime)
    return sizes[-spec.ngram_heads:]


def ple_table_rows(spec: SmallQwen4Exp, *, dense_layer: int) -> int:
    """Rows of one PLE layer's table: its heads' rows, padded to make_ngram_vocab_size_divisible_by."""
    return _padded(sum(ngram_head_sizes(spec, dense_layer=dense_layer)), spec.make_ngram_vocab_size_divisible_by)


def ple_table_bytes(spec: SmallQwen4Exp) -> int:
    width = spec.ple_row_width * PLE_TABLE_DTYPE_BYTES
    return sum(ple_table_rows(spec, dense_layer=d) * width for d in range(len(set(spec.ple_layer_ids))))


#: vLLM 0.33.0's compiled cooperative_topk kernel handles only these k.
SUPPORTED_TOPK = (512, 1024, 2048)
#: Shared memory per block on sm_90 (the H200), as Triton reports its hardware limit.
SM90_SMEM_BYTES = 232_448


def indexer_prefill_smem(spec: SmallQwen4Exp) -> int:
    """Shared memory of vLLM 0.33.0's `_qsa_mqa_paged_prefill_kernel` at its bf16 tuning (TILE_R 64,
    BLOCK_N 64, 2 stages): the whole query tile, two K stages and 8 KiB of scratch. It matches the
    303,104 bytes Triton refused on the H200 at 16 indexer heads x 128."""
    pow2 = lambda n: 1 << (n - 1).bit_length()  # noqa: E731
    d = max(16, pow2(spec.indexer_head_dim))
    return 64 * pow2(spec.indexer_n_heads) * d * 2 + 2 * 64 * d * 2 + 8192


class GeneratedModel(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: Path
    seed: int
    spec: SmallQwen4Exp
    vocab_size: int
    parameters: int
    mtp_tensors: int
    ple_table_bytes: int = 0
    ple_tensors: int = 0
    transformers_version: str


def check_spec(spec: SmallQwen4Exp) -> None:
    if spec.topk not in SUPPORTED_TOPK:
        raise ValueError(
            f"indexer_budget / indexer_compress_ratio = {spec.topk}: vLLM 0.33.0's cooperative_topk "
            f"supports k in {SUPPORTED_TOPK} only; change indexer_budget or indexer_compress_ratio"
        )
    if indexer_prefill_smem(spec) > SM90_SMEM_BYTES:
        raise ValueError(
            f"indexer_n_heads {spec.indexer_n_heads} x indexer_head_dim {spec.indexer_head_dim}: vLLM 0.33.0's QSA "
            f"indexer prefill kernel needs {indexer_prefill_smem(spec):,} B of shared memory, over sm_90's "
            f"{SM90_SMEM_BYTES:,}, and fails once a prompt passes the indexer budget; use at most 8 heads x 128"
        )
    if spec.num_hidden_layers % spec.qsa_every:
        raise ValueError("num_hidden_layers must be a multiple of qsa_every (the last layer is QSA)")
    _check_ple(spec)


def _check_ple(spec: SmallQwen4Exp) -> None:
    """What transformers' Qwen4ExpTextConfig and vLLM's Qwen4ExpNGramEmbedding would refuse later,
    refused here with the field and the fix."""
    if not spec.ple_layer_ids:
        return
    if spec.ngram_size < 2 or spec.heads_per_ngram < 1:
        raise ValueError(f"ngram_size {spec.ngram_size} / heads_per_ngram {spec.heads_per_ngram}: vLLM's PLE needs "
                         "ngram_size >= 2 and heads_per_ngram >= 1; use the real 3 and 8")
    if spec.ple_embed_dim % spec.ngram_heads:
        raise ValueError(
            f"ple_embed_dim {spec.ple_embed_dim} is not divisible by (ngram_size - 1) * heads_per_ngram = "
            f"{spec.ngram_heads}: each n-gram head gets an equal slice; use a multiple of {spec.ngram_heads}"
        )
    if len(set(spec.ple_layer_ids)) != len(spec.ple_layer_ids):
        raise ValueError(f"ple_layer_ids {list(spec.ple_layer_ids)} repeats a layer; list each PLE layer once")
    types = spec.layer_types
    outside = [i for i in spec.ple_layer_ids if not 1 <= i <= spec.num_hidden_layers]
    if outside:
        raise ValueError(f"ple_layer_ids {outside} are outside 1..{spec.num_hidden_layers}: the ids are one-indexed "
                         "decoder layers")
    qsa = [i for i in spec.ple_layer_ids if types[i - 1] != "linear_attention"]
    if qsa:
        gdn = [i + 1 for i, t in enumerate(types) if t == "linear_attention"]
        raise ValueError(f"ple_layer_ids {qsa} are QSA layers; Qwen4Exp PLE is only supported on linear_attention "
                         f"(GDN) layers: choose from {gdn}")
    if spec.ngram_vocab_size_base < 2:
        raise ValueError(f"ngram_vocab_size_base {spec.ngram_vocab_size_base} must be at least 2")
    # Each head has at least ngram_vocab_size_base rows: refuse a huge base before finding primes.
    row_bytes = spec.ple_row_width * PLE_TABLE_DTYPE_BYTES
    at_least = len(spec.ple_layer_ids) * spec.ngram_heads * spec.ngram_vocab_size_base * row_bytes
    size = at_least if at_least > MAX_PLE_TABLE_BYTES else ple_table_bytes(spec)
    if size > MAX_PLE_TABLE_BYTES:
        raise ValueError(
            f"the PLE tables would take {size:,} B, over this generator's {MAX_PLE_TABLE_BYTES:,}: lower "
            "ngram_vocab_size_base, ple_embed_dim or the number of ple_layer_ids"
        )


def text_config(spec: SmallQwen4Exp, *, vocab_size: int, bos: int, eos: int, pad: int) -> dict:
    """config.json of a Qwen4ExpForCausalLM (model_type qwen4_exp_text)."""
    check_spec(spec)
    fields = spec.model_dump(exclude={"qsa_every", "partial_rotary_factor", "rope_theta", "vocab_pad"})
    fields["ple_layer_ids"] = sorted(spec.ple_layer_ids)  # a list, as transformers' strict config wants
    return {
        "architectures": ["Qwen4ExpForCausalLM"],
        "model_type": "qwen4_exp_text",
        **fields,
        "layer_types": spec.layer_types,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": spec.rope_theta,
            "partial_rotary_factor": spec.partial_rotary_factor,
        },
        "vocab_size": vocab_size,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "dtype": "bfloat16",
    }


def _write_config(path: Path, cfg_dict: dict) -> None:
    """Keep what save_pretrained wrote, but spell the layer types as the real checkpoint does
    ("full_attention"), which every transformers version maps to its own QSA name."""
    saved = json.loads(path.read_text())
    saved["layer_types"] = cfg_dict["layer_types"]
    for key in ("mtp_num_hidden_layers", "output_gate_type", *PLE_CONFIG_KEYS):
        saved[key] = cfg_dict[key]
    path.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")


def _padded(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def build_tokenizer(tokenizer_dir: Path):
    """SmolLM2's tokenizer plus the reasoning-parser tokens, saved by this transformers."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    cfg = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")),
        bos_token=cfg.get("bos_token"), eos_token=cfg.get("eos_token"),
        pad_token=cfg.get("pad_token"), unk_token=cfg.get("unk_token"),
    )
    tok.add_special_tokens({"additional_special_tokens": list(REASONING_TOKENS)})
    template = tokenizer_dir / "chat_template.jinja"
    if template.is_file():
        tok.chat_template = template.read_text()
    return tok


def _saved_tensors(model_dir: Path) -> dict:
    """The tensors save_pretrained wrote, under their checkpoint names (per-expert MoE weights)."""
    from safetensors import safe_open

    out = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(f), "pt") as handle:
            out.update({k: handle.get_tensor(k) for k in handle.keys()})
    return out


def _mtp_tensors(state: dict, spec: SmallQwen4Exp, *, generator) -> dict:
    """The `mtp.` checkpoint tensors vLLM's Qwen4ExpMTP loads: fc_embedding, fc_hidden, the two
    pre-fc norms, one decoder layer shaped like the last QSA layer, and a final HC mixer."""
    import torch

    def like(t: torch.Tensor) -> torch.Tensor:
        std = float(t.float().std()) if t.numel() > 1 else 0.0
        lo, hi = (spec.initializer_range * f for f in _REDRAW_STD)
        if t.dim() >= 2 and lo <= std <= hi:
            return (torch.randn(t.shape, generator=generator) * spec.initializer_range).to(t.dtype)
        return t.clone()

    h, n = spec.hidden_size, spec.num_hidden_layers
    qsa = n - 1  # the last layer is QSA (check_spec)
    out: dict = {
        "mtp.fc_embedding.weight": torch.randn(h, h, generator=generator) * spec.initializer_range,
        "mtp.fc_hidden.weight": torch.randn(h, h, generator=generator) * spec.initializer_range,
        # GemmaRMSNorm in vLLM scales by (1 + w): zeros are norms at 1.
        "mtp.pre_fc_norm_embedding.weight": torch.zeros(h),
        "mtp.pre_fc_norm_hidden.weight": torch.zeros(h * spec.hc_count),
    }
    layer_prefix = f"model.layers.{qsa}."
    for name, t in state.items():
        if name.startswith(layer_prefix):
            out["mtp.layers.0." + name[len(layer_prefix):]] = like(t)  # the MTP module counts its own layers from 0
        elif name.startswith("model.hyper_connection_mixer."):
            out["mtp." + name[len("model."):]] = like(t)
    if not any(k.startswith("mtp.layers.0.self_attn.") for k in out):
        raise RuntimeError(f"layer {qsa} has no self_attn tensors: is it a QSA layer?")
    return {k: v.to(torch.bfloat16).contiguous() for k, v in out.items()}


def _ple_layout(state: dict, spec: SmallQwen4Exp) -> tuple[int, int]:
    """Check the saved PLE tables against what vLLM's loader reads (Qwen4ExpNGramEmbedding.load_weights:
    `ngram_embedding.shard_<i>.weight` of ceil(rows / split_ngram_parts) rows, or one unsharded
    `ngram_embedding.weight`) in the checkpoint dtype, so the ple-mmap patch maps them in place.
    Returns (table bytes, tensors)."""
    import torch

    total = tensors = 0
    for dense, layer_id in enumerate(sorted(spec.ple_layer_ids)):
        prefix = f"model.layers.{layer_id - 1}.ple.ple_embedding.ngram_embedding."
        parts = {k[len(prefix):]: t for k, t in state.items() if k.startswith(prefix)}
        rows = ple_table_rows(spec, dense_layer=dense)
        if set(parts) == {"weight"}:
            shards = [parts["weight"]]
            expected = [rows]
        else:
            shards = [parts.get(f"shard_{i}.weight") for i in range(len(parts))]
            per = -(-rows // spec.split_ngram_parts)
            expected = [min(per, rows - i * per) for i in range(len(parts))]
        shapes = [tuple(t.shape) if t is not None else None for t in shards]
        if not parts or shapes != [(n, spec.ple_row_width) for n in expected] or sum(expected) != rows:
            raise RuntimeError(
                f"{prefix}*: saved as {sorted(parts)[:4]}... with shapes {shapes[:4]}...; vLLM loads "
                f"{rows} rows of {spec.ple_row_width} in shards of {-(-rows // spec.split_ngram_parts)}: has this "
                "transformers' Qwen4Exp save layout changed?"
            )
        if any(t.dtype != torch.bfloat16 for t in shards):
            raise RuntimeError(f"{prefix}*: saved as {shards[0].dtype}, not the checkpoint's bfloat16: the "
                               "ple-mmap patch would build a table file instead of mapping it in place")
        total += sum(t.numel() * t.element_size() for t in shards)
        tensors += len(shards)
    return total, tensors


def generate(*, tokenizer_dir: Path, out: Path, seed: int = 0, spec: SmallQwen4Exp | None = None) -> GeneratedModel:
    """Write the model dir (config, safetensors, tokenizer) to `out`, atomically."""
    import torch
    import transformers
    from safetensors.torch import save_file

    spec = spec or SmallQwen4Exp()
    check_spec(spec)
    tok = build_tokenizer(tokenizer_dir)
    vocab = _padded(len(tok), spec.vocab_pad)
    cfg_dict = text_config(
        spec, vocab_size=vocab, bos=tok.bos_token_id, eos=tok.eos_token_id, pad=tok.pad_token_id
    )
    with replace_dir(out, replaceable=_earlier_model, what="small model", error=EngineHarnessError) as stage:
        config = transformers.Qwen4ExpTextConfig(**{k: v for k, v in cfg_dict.items() if k not in ("architectures", "model_type")})
        config.architectures = ["Qwen4ExpForCausalLM"]
        config.mtp_num_hidden_layers = spec.mtp_num_hidden_layers
        torch.manual_seed(seed)
        model = transformers.Qwen4ExpForCausalLM(config).to(torch.bfloat16)
        model.save_pretrained(stage)
        tok.save_pretrained(stage)
        state = _saved_tensors(stage)
        params = sum(t.numel() for t in state.values())
        ple_bytes, ple_tensors = _ple_layout(state, spec)
        _write_config(stage / "config.json", cfg_dict)
        mtp = _mtp_tensors(state, spec, generator=torch.Generator().manual_seed(seed + 1))
        save_file(mtp, str(stage / "mtp.safetensors"), metadata={"format": "pt"})
        index = stage / "model.safetensors.index.json"
        if index.is_file():  # sharded save: vLLM loads only the files the index names
            data = json.loads(index.read_text())
            data["weight_map"].update({k: "mtp.safetensors" for k in mtp})
            index.write_text(json.dumps(data, indent=2))
        result = GeneratedModel(
            path=out, seed=seed, spec=spec, vocab_size=vocab, parameters=params,
            mtp_tensors=len(mtp), ple_table_bytes=ple_bytes, ple_tensors=ple_tensors,
            transformers_version=transformers.__version__,
        )
        (stage / MARKER).write_text(result.model_dump_json(indent=2) + "\n")
    return result


def _earlier_model(dest: Path) -> str | None:
    """None when `dest` is a model this generator wrote (its marker parses)."""
    try:
        GeneratedModel.model_validate_json((dest / MARKER).read_bytes())
    except (OSError, ValueError):
        return f"holds no {MARKER}, so this generator did not write it"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", type=Path, required=True, help="dir with tokenizer.json, tokenizer_config.json")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    got = generate(tokenizer_dir=args.tokenizer, out=args.out, seed=args.seed)
    print(got.model_dump_json(indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
