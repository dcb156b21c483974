"""The in-image self-check: the patched engine's CPU-side checks and the launch lint.

Runs inside a built GPU image on CPU (`docker run --rm IMAGE qfn-selfcheck`), at the end of every
GPU image build, and on the host against any installed vllm==0.33.0. It imports only the standard
library and the engine, so the image carries this package alone (not the builder's dependencies).
"""
