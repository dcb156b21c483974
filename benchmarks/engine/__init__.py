"""Engine harness: the patched vLLM 0.33.0 serving a small Qwen4Exp model on an H200, measured.

One driver (`driver.py`) runs the phases (`phases.py`) against servers (`servers.py`); a transport
(`transport/`) says where the engine, its packages, the tokenizer and the state live and how results go
back: `local` for a machine that has the GPU and the engine, `chunked` for a remote GPU host reached
through a runner with per-command limits. `python -m benchmarks.engine --help`; docs/engine-harness.md.
"""
