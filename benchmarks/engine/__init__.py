"""Device harness: the patched vLLM 0.33.0 engine serving a small Qwen4Exp model on an H200.

CPU side (here): `python -m benchmarks.engine prepare` assembles the carry (engine tree with the
series applied, the two stable-ABI op libraries, locked runtime wheels, the tokenizer) in pieces
that fit one call to the GPU host. Device side: `device.py` lands the pieces, builds the model, serves it
from the rendered launch plan and measures. See evidence/engine-h200/README.md.
"""
