"""Int8 QSA split-K and quantize-on-write kernel variants timed by attention.py and store.py (same contracts as the patched kernels)."""
import triton
import triton.language as tl


@triton.jit
def _i8f16(tile):
    return tl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 biased, high, offset, lo, hi;
        xor.b32 biased, $2, 0x80808080;
        mov.b32 high, 0x64646464;
        mov.b32 offset, 0x64806480;
        prmt.b32 lo, biased, high, 0x5140;
        prmt.b32 hi, biased, high, 0x5342;
        sub.f16x2 $0, lo, offset;
        sub.f16x2 $1, hi, offset;
        }
        """,
        constraints="=r,=r,r",
        args=[tile],
        dtype=tl.float16,
        is_pure=True,
        pack=4,
    )


@triton.jit
def _tile_addr(indices_ptr, block_table_ptr, row, stride_indices_row, safe_request, stride_table_req,
               request, num_requests, num_cache_blocks, tile,
               TOPK: tl.constexpr, PAGE_SIZE: tl.constexpr, PAGE_TABLE_WIDTH: tl.constexpr, BLOCK_N: tl.constexpr):
    columns = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    logical_token = tl.load(indices_ptr + row * stride_indices_row + columns, mask=columns < TOPK, other=-1)
    safe_token = tl.maximum(logical_token, 0)
    logical_page = safe_token // PAGE_SIZE
    page_offset = safe_token % PAGE_SIZE
    valid = (request >= 0) & (request < num_requests) & (logical_token >= 0) & (logical_page < PAGE_TABLE_WIDTH)
    physical_page = tl.load(
        block_table_ptr + safe_request * stride_table_req + tl.minimum(logical_page, PAGE_TABLE_WIDTH - 1),
        mask=valid, other=-1)
    valid &= (physical_page >= 0) & (physical_page < num_cache_blocks)
    return physical_page, page_offset, valid


@triton.jit
def _gather(k_head, v_head, k_scale_ptr, v_scale_ptr, physical_page, page_offset, valid, d, kv_head,
            stride_k_block, stride_k_token, stride_v_block, stride_v_token,
            stride_scale_block, stride_scale_token, stride_scale_head):
    safe_page = tl.maximum(physical_page, 0).to(tl.int64)
    k_rows = k_head + safe_page * stride_k_block + page_offset * stride_k_token
    v_rows = v_head + safe_page * stride_v_block + page_offset * stride_v_token
    so = safe_page * stride_scale_block + page_offset * stride_scale_token + kv_head * stride_scale_head
    kt = tl.load(k_rows[None, :] + d[:, None], mask=valid[None, :], other=0)
    vt = tl.load(v_rows[:, None] + d[None, :], mask=valid[:, None], other=0)
    ksc = tl.load(k_scale_ptr + so, mask=valid, other=0.0)
    vsc = tl.load(v_scale_ptr + so, mask=valid, other=0.0)
    return kt, vt, ksc, vsc


@triton.jit(do_not_specialize=["num_rows", "num_requests"])
def qsa_int8_exp_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, indices_ptr, block_table_ptr, token_to_req_ptr,
    partial_output_ptr, partial_lse_ptr, output_ptr, softmax_scale, output_scale, output_gate_ptr,
    k_scale_ptr, v_scale_ptr,
    stride_q_row, stride_q_head, stride_k_block, stride_k_token, stride_k_head,
    stride_v_block, stride_v_token, stride_v_head, stride_indices_row, stride_table_req,
    stride_output_row, stride_output_head, stride_output_gate_row, stride_output_gate_head,
    stride_scale_block, stride_scale_token, stride_scale_head,
    num_rows, num_cache_blocks, num_requests,
    TOPK: tl.constexpr, PAGE_SIZE: tl.constexpr, PAGE_TABLE_WIDTH: tl.constexpr, GROUP_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr, NUM_QUERY_HEADS: tl.constexpr, NUM_SPLITS: tl.constexpr, NUM_TILES: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    SPLIT_DIM: tl.constexpr, PREFETCH: tl.constexpr, REGPF: tl.constexpr = 0,
) -> None:
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split_id = tl.program_id(2)
    request = tl.load(token_to_req_ptr + row)
    safe_request = tl.minimum(tl.maximum(request, 0), num_requests - 1)
    valid_count = tl.load(indices_ptr + row * stride_indices_row + TOPK)
    HALF: tl.constexpr = HEAD_DIM // 2
    head_offsets = tl.arange(0, BLOCK_M)
    first_head = kv_head * GROUP_SIZE
    head_mask = head_offsets[:, None] < GROUP_SIZE
    q_base = q_ptr + row * stride_q_row + (first_head + head_offsets[:, None]) * stride_q_head
    if SPLIT_DIM:
        d = tl.arange(0, HALF)
        q_lo = tl.load(q_base + d[None, :], mask=head_mask, other=0.0).to(tl.float16)
        q_hi = tl.load(q_base + HALF + d[None, :], mask=head_mask, other=0.0).to(tl.float16)
        acc_lo = tl.zeros((BLOCK_M, HALF), dtype=tl.float32)
        acc_hi = tl.zeros((BLOCK_M, HALF), dtype=tl.float32)
    else:
        d = tl.arange(0, HEAD_DIM)
        q_lo = tl.load(q_base + d[None, :], mask=head_mask, other=0.0).to(tl.float16)
        q_hi = q_lo
        acc_lo = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
        acc_hi = acc_lo
    max_value = tl.full((BLOCK_M,), -1.0e20, dtype=tl.float32)
    normalizer = tl.zeros((BLOCK_M,), dtype=tl.float32)
    score_scale = softmax_scale * 1.4426950408889634
    tile_end = tl.minimum(NUM_TILES, tl.cdiv(tl.minimum(valid_count, TOPK), BLOCK_N))
    k_head = k_cache_ptr + kv_head * stride_k_head
    v_head = v_cache_ptr + kv_head * stride_v_head
    if REGPF:
        d = tl.arange(0, HEAD_DIM)
        pp, po, vd = _tile_addr(
            indices_ptr, block_table_ptr, row, stride_indices_row, safe_request, stride_table_req,
            request, num_requests, num_cache_blocks, split_id, TOPK, PAGE_SIZE, PAGE_TABLE_WIDTH, BLOCK_N)
        vd &= split_id < tile_end
        kt, vt, ksc, vsc = _gather(k_head, v_head, k_scale_ptr, v_scale_ptr, pp, po, vd, d, kv_head,
                                   stride_k_block, stride_k_token, stride_v_block, stride_v_token,
                                   stride_scale_block, stride_scale_token, stride_scale_head)
        for tile in range(split_id, tile_end, NUM_SPLITS):
            npp, npo, nvd = _tile_addr(
                indices_ptr, block_table_ptr, row, stride_indices_row, safe_request, stride_table_req,
                request, num_requests, num_cache_blocks, tile + NUM_SPLITS, TOPK, PAGE_SIZE, PAGE_TABLE_WIDTH, BLOCK_N)
            nvd &= (tile + NUM_SPLITS) < tile_end
            nkt, nvt, nksc, nvsc = _gather(k_head, v_head, k_scale_ptr, v_scale_ptr, npp, npo, nvd, d, kv_head,
                                           stride_k_block, stride_k_token, stride_v_block, stride_v_token,
                                           stride_scale_block, stride_scale_token, stride_scale_head)
            scores = tl.dot(q_lo, _i8f16(kt))
            scores *= (ksc * score_scale)[None, :]
            scores = tl.where(vd[None, :], scores, -1.0e20)
            next_max = tl.maximum(max_value, tl.max(scores, axis=1))
            alpha = tl.math.exp2(max_value - next_max)
            probabilities = tl.where(vd[None, :], tl.math.exp2(scores - next_max[:, None]), 0.0)
            pv = (probabilities * (vsc * 128.0)[None, :]).to(tl.float16)
            acc_lo = tl.dot(pv, _i8f16(vt), acc=acc_lo * alpha[:, None])
            normalizer = normalizer * alpha + tl.sum(probabilities, axis=1)
            max_value = next_max
            kt, vt, ksc, vsc, vd = nkt, nvt, nksc, nvsc, nvd
    if PREFETCH and not REGPF:
        physical_page, page_offset, valid = _tile_addr(
            indices_ptr, block_table_ptr, row, stride_indices_row, safe_request, stride_table_req,
            request, num_requests, num_cache_blocks, split_id, TOPK, PAGE_SIZE, PAGE_TABLE_WIDTH, BLOCK_N)
    for tile in range(split_id, tile_end * (1 - REGPF), NUM_SPLITS):
        if not PREFETCH:
            physical_page, page_offset, valid = _tile_addr(
                indices_ptr, block_table_ptr, row, stride_indices_row, safe_request, stride_table_req,
                request, num_requests, num_cache_blocks, tile, TOPK, PAGE_SIZE, PAGE_TABLE_WIDTH, BLOCK_N)
        safe_page = tl.maximum(physical_page, 0).to(tl.int64)
        k_rows = k_head + safe_page * stride_k_block + page_offset * stride_k_token
        v_rows = v_head + safe_page * stride_v_block + page_offset * stride_v_token
        scale_offsets = safe_page * stride_scale_block + page_offset * stride_scale_token + kv_head * stride_scale_head
        column_k_scale = tl.load(k_scale_ptr + scale_offsets, mask=valid, other=0.0)
        column_v_scale = tl.load(v_scale_ptr + scale_offsets, mask=valid, other=0.0)
        if SPLIT_DIM:
            k_lo = tl.load(k_rows[None, :] + d[:, None], mask=valid[None, :], other=0)
            k_hi = tl.load(k_rows[None, :] + HALF + d[:, None], mask=valid[None, :], other=0)
            v_lo = tl.load(v_rows[:, None] + d[None, :], mask=valid[:, None], other=0)
            v_hi = tl.load(v_rows[:, None] + HALF + d[None, :], mask=valid[:, None], other=0)
        else:
            k_lo = tl.load(k_rows[None, :] + d[:, None], mask=valid[None, :], other=0)
            v_lo = tl.load(v_rows[:, None] + d[None, :], mask=valid[:, None], other=0)
        cur_valid = valid
        if PREFETCH:
            # Next tile's pages now, so its gather does not wait on two dependent loads.
            physical_page, page_offset, valid = _tile_addr(
                indices_ptr, block_table_ptr, row, stride_indices_row, safe_request, stride_table_req,
                request, num_requests, num_cache_blocks, tile + NUM_SPLITS, TOPK, PAGE_SIZE, PAGE_TABLE_WIDTH, BLOCK_N)
        if SPLIT_DIM:
            scores = tl.dot(q_lo, _i8f16(k_lo))
            scores = tl.dot(q_hi, _i8f16(k_hi), acc=scores)
        else:
            scores = tl.dot(q_lo, _i8f16(k_lo))
        scores *= (column_k_scale * score_scale)[None, :]
        scores = tl.where(cur_valid[None, :], scores, -1.0e20)
        next_max = tl.maximum(max_value, tl.max(scores, axis=1))
        alpha = tl.math.exp2(max_value - next_max)
        probabilities = tl.where(cur_valid[None, :], tl.math.exp2(scores - next_max[:, None]), 0.0)
        pv = (probabilities * (column_v_scale * 128.0)[None, :]).to(tl.float16)
        if SPLIT_DIM:
            acc_lo = tl.dot(pv, _i8f16(v_lo), acc=acc_lo * alpha[:, None])
            acc_hi = tl.dot(pv, _i8f16(v_hi), acc=acc_hi * alpha[:, None])
        else:
            acc_lo = tl.dot(pv, _i8f16(v_lo), acc=acc_lo * alpha[:, None])
        normalizer = normalizer * alpha + tl.sum(probabilities, axis=1)
        max_value = next_max

    has_values = normalizer > 0
    inv_normalizer = output_scale / tl.maximum(normalizer, 1.0e-20)
    out_lo = tl.where(has_values[:, None], acc_lo * inv_normalizer[:, None], 0.0)
    _emit(out_lo, d, 0, row, first_head, head_offsets, head_mask, has_values, max_value, normalizer, split_id,
          num_rows, partial_output_ptr, partial_lse_ptr, output_ptr, output_gate_ptr, stride_output_row,
          stride_output_head, stride_output_gate_row, stride_output_gate_head, NUM_SPLITS, NUM_QUERY_HEADS,
          HEAD_DIM, GROUP_SIZE, True)
    if SPLIT_DIM:
        out_hi = tl.where(has_values[:, None], acc_hi * inv_normalizer[:, None], 0.0)
        _emit(out_hi, d, HALF, row, first_head, head_offsets, head_mask, has_values, max_value, normalizer,
              split_id, num_rows, partial_output_ptr, partial_lse_ptr, output_ptr, output_gate_ptr,
              stride_output_row, stride_output_head, stride_output_gate_row, stride_output_gate_head,
              NUM_SPLITS, NUM_QUERY_HEADS, HEAD_DIM, GROUP_SIZE, False)


@triton.jit
def _emit(normalized_output, d, d0, row, first_head, head_offsets, output_mask, has_values, max_value, normalizer,
          split_id, num_rows, partial_output_ptr, partial_lse_ptr, output_ptr, output_gate_ptr,
          stride_output_row, stride_output_head, stride_output_gate_row, stride_output_gate_head,
          NUM_SPLITS: tl.constexpr, NUM_QUERY_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
          GROUP_SIZE: tl.constexpr, WRITE_LSE: tl.constexpr):
    if NUM_SPLITS == 1:
        normalized_output = normalized_output.to(output_ptr.dtype.element_ty)
        gate = tl.load(output_gate_ptr + row * stride_output_gate_row
                       + (first_head + head_offsets[:, None]) * stride_output_gate_head + d0 + d[None, :],
                       mask=output_mask, other=0.0).to(tl.float32)
        normalized_output = normalized_output.to(tl.float32) * tl.sigmoid(gate)
        tl.store(output_ptr + row * stride_output_row + (first_head + head_offsets[:, None]) * stride_output_head
                 + d0 + d[None, :], normalized_output, mask=output_mask)
    else:
        partial_row = (split_id * num_rows + row).to(tl.int64)
        tl.store(partial_output_ptr + (partial_row * NUM_QUERY_HEADS + first_head + head_offsets[:, None]) * HEAD_DIM
                 + d0 + d[None, :], normalized_output, mask=output_mask)
        if WRITE_LSE:
            partial_lse = tl.where(has_values, max_value + tl.math.log2(tl.maximum(normalizer, 1.0e-20)), -float("inf"))
            tl.store(partial_lse_ptr + partial_row * NUM_QUERY_HEADS + first_head + head_offsets, partial_lse,
                     mask=head_offsets < GROUP_SIZE)


from triton.language.extra import libdevice


@triton.jit
def _q8(x, scale):
    q = libdevice.mul_rn(x, libdevice.div_rn(1.0, scale))
    q = libdevice.round(q)
    return tl.minimum(tl.maximum(q, -128.0), 127.0).to(tl.int8)


@triton.jit
def store_int8_exp_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, k_scale_ptr, v_scale_ptr, slots_ptr,
    stride_key_token, stride_key_head, stride_value_token, stride_value_head,
    stride_cache_block, stride_cache_token, stride_cache_head,
    stride_scale_block, stride_scale_token, stride_scale_head,
    num_tokens, num_slots,
    PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr, EARLY: tl.constexpr = 0,
):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    head = tl.program_id(1)
    in_range = tokens < num_tokens
    slot = tl.load(slots_ptr + tokens, mask=in_range, other=-1).to(tl.int64)
    valid = in_range & (slot >= 0) & (slot < num_slots)
    block = slot // PAGE_SIZE
    offset = slot % PAGE_SIZE
    dims = tl.arange(0, HEAD_DIM)
    t64 = tokens.to(tl.int64)
    cache_row = (block * stride_cache_block + offset * stride_cache_token + head * stride_cache_head)[:, None] + dims[None, :]
    scale_slot = block * stride_scale_block + offset * stride_scale_token + head * stride_scale_head
    if EARLY:
        k = tl.load(key_ptr + (t64 * stride_key_token + head * stride_key_head)[:, None] + dims[None, :], mask=in_range[:, None], other=0.0).to(tl.float32)
        v = tl.load(value_ptr + (t64 * stride_value_token + head * stride_value_head)[:, None] + dims[None, :], mask=in_range[:, None], other=0.0).to(tl.float32)
    else:
        k = tl.load(key_ptr + (t64 * stride_key_token + head * stride_key_head)[:, None] + dims[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
    k_scale = tl.maximum(libdevice.div_rn(tl.max(tl.abs(k), axis=1), 127.0), 1e-6)
    tl.store(key_cache_ptr + cache_row, _q8(k, k_scale[:, None]), mask=valid[:, None])
    tl.store(k_scale_ptr + scale_slot, k_scale, mask=valid)
    if not EARLY:
        v = tl.load(value_ptr + (t64 * stride_value_token + head * stride_value_head)[:, None] + dims[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
    v_scale = tl.maximum(libdevice.div_rn(tl.max(tl.abs(v), axis=1), 127.0), 1e-6)
    tl.store(value_cache_ptr + cache_row, _q8(v, v_scale[:, None]), mask=valid[:, None])
    tl.store(v_scale_ptr + scale_slot, v_scale, mask=valid)


@triton.jit
def _i16_pairs_to_f16(tile, FOLD: tl.constexpr):
    """int16 elements that each hold two int8 values (low byte: even dim, high byte:
    odd dim) -> (even-dim fp16, odd-dim fp16), same positions as the input. Loading V as
    int16 lets the dot operand come from 16-bit transposing smem loads instead of
    one byte load per element. FOLD leaves the +1152 bias in (corrected by the caller)."""
    if FOLD:
        return tl.inline_asm_elementwise(
            asm="""
            {
            .reg .b32 b0, b1, high;
            xor.b32 b0, $4, 0x80808080;
            xor.b32 b1, $5, 0x80808080;
            mov.b32 high, 0x64646464;
            prmt.b32 $0, b0, high, 0x4240;
            prmt.b32 $1, b1, high, 0x4240;
            prmt.b32 $2, b0, high, 0x4341;
            prmt.b32 $3, b1, high, 0x4341;
            }
            """,
            constraints="=r,=r,=r,=r,r,r", args=[tile], dtype=(tl.float16, tl.float16), is_pure=True, pack=4)
    else:
        return tl.inline_asm_elementwise(
            asm="""
            {
            .reg .b32 b0, b1, high, offset, e0, e1, o0, o1;
            xor.b32 b0, $4, 0x80808080;
            xor.b32 b1, $5, 0x80808080;
            mov.b32 high, 0x64646464;
            mov.b32 offset, 0x64806480;
            prmt.b32 e0, b0, high, 0x4240;
            prmt.b32 e1, b1, high, 0x4240;
            prmt.b32 o0, b0, high, 0x4341;
            prmt.b32 o1, b1, high, 0x4341;
            sub.f16x2 $0, e0, offset;
            sub.f16x2 $1, e1, offset;
            sub.f16x2 $2, o0, offset;
            sub.f16x2 $3, o1, offset;
            }
            """,
            constraints="=r,=r,=r,=r,r,r", args=[tile], dtype=(tl.float16, tl.float16), is_pure=True, pack=4)


@triton.jit
def _i8f16_biased(tile):
    """int8 -> fp16 of x + 1152 (exact): the shipped decode without its subtraction."""
    return tl.inline_asm_elementwise(
        asm="""
        {
        .reg .b32 biased, high;
        xor.b32 biased, $2, 0x80808080;
        mov.b32 high, 0x64646464;
        prmt.b32 $0, biased, high, 0x5140;
        prmt.b32 $1, biased, high, 0x5342;
        }
        """,
        constraints="=r,=r,r", args=[tile], dtype=tl.float16, is_pure=True, pack=4)


@triton.jit(do_not_specialize=["num_rows", "num_requests"])
def qsa_int8_vt_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, indices_ptr, block_table_ptr, token_to_req_ptr,
    partial_output_ptr, partial_lse_ptr, output_ptr, softmax_scale, output_scale, output_gate_ptr,
    k_scale_ptr, v_scale_ptr,
    stride_q_row, stride_q_head, stride_k_block, stride_k_token, stride_k_head,
    stride_v_block, stride_v_token, stride_v_head, stride_indices_row, stride_table_req,
    stride_output_row, stride_output_head, stride_output_gate_row, stride_output_gate_head,
    stride_scale_block, stride_scale_token, stride_scale_head,
    num_rows, num_cache_blocks, num_requests,
    TOPK: tl.constexpr, PAGE_SIZE: tl.constexpr, PAGE_TABLE_WIDTH: tl.constexpr, GROUP_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr, NUM_QUERY_HEADS: tl.constexpr, NUM_SPLITS: tl.constexpr, NUM_TILES: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    VT: tl.constexpr, FOLD: tl.constexpr, LAZY: tl.constexpr,
) -> None:
    """The shipped int8 kernel (head_dim halves, early page loads) plus three switches:
    VT: V read as int16 dim pairs, its dot split into even and odd dims (joined at the end);
    FOLD: K and V decode without the -1152, corrected per row by Q's sum and P's weight sum;
    LAZY: the accumulators are rescaled only in tiles where some row's max grew."""
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split_id = tl.program_id(2)
    request = tl.load(token_to_req_ptr + row)
    safe_request = tl.minimum(tl.maximum(request, 0), num_requests - 1)
    valid_count = tl.load(indices_ptr + row * stride_indices_row + TOPK)
    HALF: tl.constexpr = HEAD_DIM // 2
    QUARTER: tl.constexpr = HEAD_DIM // 4
    head_offsets = tl.arange(0, BLOCK_M)
    half_dims = tl.arange(0, HALF)
    pairs = tl.arange(0, QUARTER)
    first_head = kv_head * GROUP_SIZE
    head_mask = head_offsets[:, None] < GROUP_SIZE
    q_rows = q_ptr + row * stride_q_row + (first_head + head_offsets[:, None]) * stride_q_head + half_dims[None, :]
    query_lo = tl.load(q_rows, mask=head_mask, other=0.0).to(tl.float16)
    query_hi = tl.load(q_rows + HALF, mask=head_mask, other=0.0).to(tl.float16)
    if FOLD:
        k_bias = 1152.0 * (tl.sum(query_lo.to(tl.float32), axis=1) + tl.sum(query_hi.to(tl.float32), axis=1))
        weight_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    max_value = tl.full((BLOCK_M,), -1.0e20, dtype=tl.float32)
    normalizer = tl.zeros((BLOCK_M,), dtype=tl.float32)
    if VT:
        acc_a = tl.zeros((BLOCK_M, QUARTER), dtype=tl.float32)  # dims 0..127 even
        acc_b = tl.zeros((BLOCK_M, QUARTER), dtype=tl.float32)  # dims 0..127 odd
        acc_c = tl.zeros((BLOCK_M, QUARTER), dtype=tl.float32)  # dims 128..255 even
        acc_d = tl.zeros((BLOCK_M, QUARTER), dtype=tl.float32)  # dims 128..255 odd
    else:
        acc_a = tl.zeros((BLOCK_M, HALF), dtype=tl.float32)
        acc_b = tl.zeros((BLOCK_M, HALF), dtype=tl.float32)
        acc_c = acc_a
        acc_d = acc_b
    score_scale = softmax_scale * 1.4426950408889634
    k_head = k_cache_ptr + kv_head * stride_k_head
    v_head = v_cache_ptr + kv_head * stride_v_head
    tile_end = tl.minimum(NUM_TILES, tl.cdiv(tl.minimum(valid_count, TOPK), BLOCK_N))
    physical_page, page_offset, valid = _tile_addr(
        indices_ptr, block_table_ptr, row, stride_indices_row, safe_request, stride_table_req,
        request, num_requests, num_cache_blocks, split_id, TOPK, PAGE_SIZE, PAGE_TABLE_WIDTH, BLOCK_N)
    for tile in range(split_id, tile_end, NUM_SPLITS):
        safe_page = tl.maximum(physical_page, 0).to(tl.int64)
        k_rows = k_head + safe_page * stride_k_block + page_offset * stride_k_token
        v_rows = v_head + safe_page * stride_v_block + page_offset * stride_v_token
        scale_offsets = safe_page * stride_scale_block + page_offset * stride_scale_token + kv_head * stride_scale_head
        column_k_scale = tl.load(k_scale_ptr + scale_offsets, mask=valid, other=0.0)
        column_v_scale = tl.load(v_scale_ptr + scale_offsets, mask=valid, other=0.0)
        keys_lo = tl.load(k_rows[None, :] + half_dims[:, None], mask=valid[None, :], other=0)
        keys_hi = tl.load(k_rows[None, :] + HALF + half_dims[:, None], mask=valid[None, :], other=0)
        if VT:
            v_pairs = v_rows.to(tl.pointer_type(tl.int16))
            values_lo = tl.load(v_pairs[:, None] + pairs[None, :], mask=valid[:, None], other=0)
            values_hi = tl.load(v_pairs[:, None] + QUARTER + pairs[None, :], mask=valid[:, None], other=0)
        else:
            values_lo = tl.load(v_rows[:, None] + half_dims[None, :], mask=valid[:, None], other=0)
            values_hi = tl.load(v_rows[:, None] + HALF + half_dims[None, :], mask=valid[:, None], other=0)
        tile_valid = valid
        physical_page, page_offset, valid = _tile_addr(
            indices_ptr, block_table_ptr, row, stride_indices_row, safe_request, stride_table_req,
            request, num_requests, num_cache_blocks, tile + NUM_SPLITS, TOPK, PAGE_SIZE, PAGE_TABLE_WIDTH, BLOCK_N)
        if FOLD:
            scores = tl.dot(query_lo, _i8f16_biased(keys_lo))
            scores = tl.dot(query_hi, _i8f16_biased(keys_hi), acc=scores)
            scores -= k_bias[:, None]
        else:
            scores = tl.dot(query_lo, _i8f16(keys_lo))
            scores = tl.dot(query_hi, _i8f16(keys_hi), acc=scores)
        scores *= (column_k_scale * score_scale)[None, :]
        scores = tl.where(tile_valid[None, :], scores, -1.0e20)
        next_max = tl.maximum(max_value, tl.max(scores, axis=1))
        alpha = tl.math.exp2(max_value - next_max)
        probabilities = tl.where(tile_valid[None, :], tl.math.exp2(scores - next_max[:, None]), 0.0)
        pv_weights = (probabilities * (column_v_scale * 128.0)[None, :]).to(tl.float16)
        if LAZY:
            if tl.max(next_max - max_value, axis=0) > 0.0:
                acc_a = acc_a * alpha[:, None]
                acc_b = acc_b * alpha[:, None]
                if VT:
                    acc_c = acc_c * alpha[:, None]
                    acc_d = acc_d * alpha[:, None]
        else:
            acc_a = acc_a * alpha[:, None]
            acc_b = acc_b * alpha[:, None]
            if VT:
                acc_c = acc_c * alpha[:, None]
                acc_d = acc_d * alpha[:, None]
        if VT:
            even_lo, odd_lo = _i16_pairs_to_f16(values_lo, FOLD)
            acc_a = tl.dot(pv_weights, even_lo, acc=acc_a)
            acc_b = tl.dot(pv_weights, odd_lo, acc=acc_b)
            even_hi, odd_hi = _i16_pairs_to_f16(values_hi, FOLD)
            acc_c = tl.dot(pv_weights, even_hi, acc=acc_c)
            acc_d = tl.dot(pv_weights, odd_hi, acc=acc_d)
        elif FOLD:
            acc_a = tl.dot(pv_weights, _i8f16_biased(values_lo), acc=acc_a)
            acc_b = tl.dot(pv_weights, _i8f16_biased(values_hi), acc=acc_b)
        else:
            acc_a = tl.dot(pv_weights, _i8f16(values_lo), acc=acc_a)
            acc_b = tl.dot(pv_weights, _i8f16(values_hi), acc=acc_b)
        if FOLD:
            weight_sum = weight_sum * alpha + tl.sum(pv_weights.to(tl.float32), axis=1)
        normalizer = normalizer * alpha + tl.sum(probabilities, axis=1)
        max_value = next_max

    if VT:
        out_lo = tl.reshape(tl.join(acc_a, acc_b), (BLOCK_M, HALF))
        out_hi = tl.reshape(tl.join(acc_c, acc_d), (BLOCK_M, HALF))
    else:
        out_lo = acc_a
        out_hi = acc_b
    if FOLD:
        out_lo -= 1152.0 * weight_sum[:, None]
        out_hi -= 1152.0 * weight_sum[:, None]
    has_values = normalizer > 0
    inv_normalizer = output_scale / tl.maximum(normalizer, 1.0e-20)
    out_lo = tl.where(has_values[:, None], out_lo * inv_normalizer[:, None], 0.0)
    _emit(out_lo, half_dims, 0, row, first_head, head_offsets, head_mask, has_values, max_value, normalizer, split_id,
          num_rows, partial_output_ptr, partial_lse_ptr, output_ptr, output_gate_ptr, stride_output_row,
          stride_output_head, stride_output_gate_row, stride_output_gate_head, NUM_SPLITS, NUM_QUERY_HEADS,
          HEAD_DIM, GROUP_SIZE, True)
    out_hi = tl.where(has_values[:, None], out_hi * inv_normalizer[:, None], 0.0)
    _emit(out_hi, half_dims, HALF, row, first_head, head_offsets, head_mask, has_values, max_value, normalizer,
          split_id, num_rows, partial_output_ptr, partial_lse_ptr, output_ptr, output_gate_ptr,
          stride_output_row, stride_output_head, stride_output_gate_row, stride_output_gate_head,
          NUM_SPLITS, NUM_QUERY_HEADS, HEAD_DIM, GROUP_SIZE, False)


@triton.jit
def store_int8_heads_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, k_scale_ptr, v_scale_ptr, slots_ptr,
    stride_key_token, stride_key_head, stride_value_token, stride_value_head,
    stride_cache_block, stride_cache_token, stride_cache_head,
    stride_scale_block, stride_scale_token, stride_scale_head,
    num_tokens, num_slots,
    PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, NUM_HEADS: tl.constexpr, BLOCK_T: tl.constexpr,
    QUANT: tl.constexpr = 1,
):
    """BLOCK_T tokens x every head per program: a token's heads are one contiguous
    bf16 read, and their scales are adjacent in the side tensor. QUANT=0 writes
    x.to(int8) and scale 1 instead: the same memory traffic without the quantize math,
    the ceiling for this access pattern."""
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    in_range = tokens < num_tokens
    rows = tokens.to(tl.int64)
    heads = tl.arange(0, NUM_HEADS)
    dims = tl.arange(0, HEAD_DIM)
    slot = tl.load(slots_ptr + rows, mask=in_range, other=-1).to(tl.int64)
    src_k = (rows * stride_key_token)[:, None, None] + (heads * stride_key_head)[None, :, None] + dims[None, None, :]
    src_v = (rows * stride_value_token)[:, None, None] + (heads * stride_value_head)[None, :, None] + dims[None, None, :]
    k = tl.load(key_ptr + src_k, mask=in_range[:, None, None], other=0.0).to(tl.float32)
    v = tl.load(value_ptr + src_v, mask=in_range[:, None, None], other=0.0).to(tl.float32)
    valid = in_range & (slot >= 0) & (slot < num_slots)
    block = slot // PAGE_SIZE
    offset = slot % PAGE_SIZE
    dst = (block * stride_cache_block + offset * stride_cache_token)[:, None, None] + (heads * stride_cache_head)[None, :, None] + dims[None, None, :]
    scale_dst = (block * stride_scale_block + offset * stride_scale_token)[:, None] + (heads * stride_scale_head)[None, :]
    if QUANT:
        k_scale = tl.maximum(libdevice.div_rn(tl.max(tl.abs(k), axis=2), 127.0), 1e-6)
        v_scale = tl.maximum(libdevice.div_rn(tl.max(tl.abs(v), axis=2), 127.0), 1e-6)
        k_q = _q8(k, k_scale[:, :, None])
        v_q = _q8(v, v_scale[:, :, None])
    else:
        k_scale = tl.full((BLOCK_T, NUM_HEADS), 1.0, tl.float32)
        v_scale = k_scale
        k_q = k.to(tl.int8)
        v_q = v.to(tl.int8)
    tl.store(key_cache_ptr + dst, k_q, mask=valid[:, None, None])
    tl.store(value_cache_ptr + dst, v_q, mask=valid[:, None, None])
    tl.store(k_scale_ptr + scale_dst, k_scale, mask=valid[:, None])
    tl.store(v_scale_ptr + scale_dst, v_scale, mask=valid[:, None])
