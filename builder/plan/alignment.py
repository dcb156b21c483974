"""The attention block size of a hybrid model, as vLLM 0.33.0 picks it.

``Platform._align_hybrid_block_size`` (vllm/platforms/interface.py) makes one attention page
at least as large as the largest recurrent-state page (GDN or PLE), in steps of the kernel
block (16 tokens for QSA, ``MultipleOf(16)``), or of the Mamba prefill-checkpoint alignment
when prefix caching puts the states in "align" mode; the state pages are then padded to that
attention page. A token therefore costs ``page / block_size`` bytes, but every block, whoever
uses it, is one state page wide.
"""

from __future__ import annotations

from math import lcm
from typing import Literal

from pydantic import BaseModel, ConfigDict

#: Smallest kernel block of the QSA backend: get_supported_kernel_block_sizes() == [MultipleOf(16)].
QSA_KERNEL_BLOCK = 16
#: FLASHINFER_GDN_CHECKPOINT_ALIGNMENT (vllm/v1/attention/backends/gdn_attn.py).
FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64
#: A Qwen4Exp PLE layer declares checkpoint alignment 1 in align mode (ple_layer.py).
PLE_CHECKPOINT_ALIGNMENT = 1

GdnPrefillBackend = Literal["flashinfer", "triton"]


class BlockAlignment(BaseModel):
    """The block size and the reasons for it."""

    model_config = ConfigDict(frozen=True)

    block_size: int
    step: int
    state_page_bytes: int
    attention_page_bytes: int


def gdn_prefill_backend(*, gpu_arch: str | None, cuda: str | None, key_head_dim: int) -> GdnPrefillBackend:
    """``_resolve_gdn_prefill_backend`` with "auto": FlashInfer on sm_90, and on sm_10x / sm_12x
    when head_k_dim is 128 and the CUDA runtime is 13 or newer; Triton otherwise."""
    if gpu_arch is None:
        return "triton"
    major = int(gpu_arch.removeprefix("sm_")) // 10
    cuda_major = int(cuda.split(".")[0]) if cuda else 0
    if major == 9:
        return "flashinfer"
    if major in (10, 12) and key_head_dim == 128 and cuda_major >= 13:
        return "flashinfer"
    return "triton"


def checkpoint_alignment(*, align_mode: bool, backend: GdnPrefillBackend) -> int | None:
    """``get_mamba_prefill_checkpoint_alignment``: the LCM over every Mamba layer (GDN, and PLE
    when present, which declares 1), or None as soon as one cannot export prefill checkpoints:
    GDN only can with FlashInfer, and only in align mode."""
    if not align_mode or backend != "flashinfer":
        return None
    return lcm(FLASHINFER_GDN_CHECKPOINT_ALIGNMENT, PLE_CHECKPOINT_ALIGNMENT)


def hybrid_block_size(*, page_bytes_per_token: int, state_page_bytes: int, start_block_size: int,
                      checkpoint: int | None) -> BlockAlignment:
    """Smallest block (a multiple of the kernel and checkpoint steps) whose page covers the state page."""
    step = max(QSA_KERNEL_BLOCK, start_block_size)
    step = lcm(step, checkpoint or 1)
    block = step * -(-state_page_bytes // (step * page_bytes_per_token))
    # Also a multiple of every attention backend's smallest kernel block (QSA 16, QSA state 1).
    block = QSA_KERNEL_BLOCK * -(-block // QSA_KERNEL_BLOCK)
    block = max(block, start_block_size)
    return BlockAlignment(block_size=block, step=step, state_page_bytes=state_page_bytes,
                          attention_page_bytes=block * page_bytes_per_token)
