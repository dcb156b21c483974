"""Host-side model preparation: turn a model shipped on PyPI into a safetensors HF model dir."""

from builder.models.smollm2 import PreparedModel, prepare_smollm2

__all__ = ["PreparedModel", "prepare_smollm2"]
