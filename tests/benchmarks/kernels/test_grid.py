"""The grid's engine-shaped selections (CPU): the indexer's block draws, and the check every
engine-selected point passes on the GPU before it is timed."""

from __future__ import annotations

import pytest
import torch

from benchmarks.kernels import grid
from benchmarks.kernels.grid import COMPRESS_RATIO as R


def point(context=64, requests=3, rows_per_request=5, width=2051, prefill=False):
    return grid.Point(context, "test", requests, rows_per_request, prefill, width, 24, 2)


class ContractExpand:
    """The expand kernel's documented contract in torch, standing in for the engine's Triton
    kernel (which needs a GPU; the grid runs the real one and checks each result)."""

    def expand_qsa_block_indices(self, blocks, positions, visible, ratio, budget, out):
        out.fill_(-1)
        for row, (position, seen) in enumerate(zip(positions.tolist(), visible.tolist(), strict=True)):
            complete = min(seen, budget // ratio)
            tokens = [b * ratio + o for b in blocks[row, :complete].tolist() for o in range(ratio)]
            tail_start = (position + 1) // ratio * ratio
            tokens += list(range(tail_start, position + 1))[: ratio - 1]
            out[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.int32)
            out[row, -1] = len(tokens)


def test_the_budget_is_the_width_less_the_open_group():
    assert [grid.indexer_budget(w) for w in grid.WIDTHS] == [1020, 2048, 4096]


def test_rows_are_each_requests_last_positions():
    assert grid.row_positions(point(context=64, requests=2, rows_per_request=3)).tolist() == [61, 62, 63] * 2


@pytest.mark.parametrize("shared", [False, True])
def test_drawn_blocks_are_distinct_and_visible_to_their_row(shared):
    p = point(context=4096, requests=4, rows_per_request=5, width=1024)
    blocks, positions, visible = grid.draw_blocks(p, torch.Generator().manual_seed(0), shared=shared)
    assert blocks.shape == (20, 255) and blocks.dtype == torch.int32
    assert visible.tolist() == [((x + 1) // R) for x in positions.tolist()]
    for row in range(p.rows):
        seen = blocks[row, : min(int(visible[row]), 255)]
        assert seen.unique().numel() == seen.numel() and int(seen.max()) < int(visible[row])
    firsts = blocks[:, 0].view(p.requests, p.rows_per_request)
    if shared:  # a request's rows see the same 1023-1024 blocks and rank them alike
        assert (firsts == firsts[:, :1]).all()
    else:  # control: independent rows disagree
        assert not (firsts == firsts[:, :1]).all()


def test_a_row_that_sees_fewer_blocks_than_its_budget_takes_all_it_sees():
    p = point(context=64, requests=1, rows_per_request=5, width=2051)  # 16 blocks, budget 512
    blocks, _, visible = grid.draw_blocks(p, torch.Generator().manual_seed(0), shared=False)
    assert blocks.shape == (5, 512) and (blocks[:, 16:] == -1).all()
    assert sorted(blocks[4, :16].tolist()) == list(range(16)) and visible.tolist() == [15, 15, 15, 15, 16]  # positions 59-63


@pytest.mark.parametrize("width", grid.WIDTHS)
def test_engine_selection_packs_runs_of_four_and_the_causal_tail(width):
    p = point(context=4096, requests=2, rows_per_request=5, width=width)
    logical = grid.engine_selection(ContractExpand(), p, torch.Generator().manual_seed(1), shared=False)
    assert logical.shape == (10, width + 1)
    budget = grid.indexer_budget(width)
    for row, position in enumerate(grid.row_positions(p).tolist()):
        count = int(logical[row, width])
        tokens = logical[row, :count]
        complete = min((position + 1) // R, budget // R)
        assert count == complete * R + (position + 1) % R
        runs = tokens[: complete * R].view(-1, R)
        assert (runs[:, 0] % R == 0).all() and (runs - runs[:, :1] == torch.arange(R)).all()
        assert (logical[row, count:width] == -1).all()


def good_rows():
    p = point(context=64, requests=1, rows_per_request=5)
    logical = grid.engine_selection(ContractExpand(), p, torch.Generator().manual_seed(2), shared=False)
    return logical, grid.row_positions(p)


def test_the_check_passes_the_contract():
    grid.check_selection(*good_rows())


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t, w: t[0, w].add_(1), "count column"),
        (lambda t, w: t[0, 1].fill_(-1), "count column"),
        (lambda t, w: (t[0, 1].fill_(-1), t[0, w].sub_(1)), "packed at the front"),
        (lambda t, w: t[0, 0].fill_(63), "after its own position"),  # row 0 is position 59
        (lambda t, w: t[1, 1].copy_(t[1, 0]), "twice"),
    ],
    ids=["count+1", "hole", "hole-counted", "future", "duplicate"],
)
def test_the_check_refuses_a_broken_row(mutate, message):
    logical, positions = good_rows()
    mutate(logical, logical.shape[1] - 1)
    with pytest.raises(grid.SelectionError, match=message):
        grid.check_selection(logical, positions)
