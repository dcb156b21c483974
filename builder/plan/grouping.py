"""How vLLM 0.33.0 packs the caches into blocks, and what one block and one request cost.

All groups draw block ids from one pool, and a block is as wide as the widest group
(``_get_kv_cache_bytes_per_block``). A request at ``max_model_len`` takes, from every group,
the pages its spec needs (``get_max_concurrency_for_kv_cache_config``): ``cdiv(len, block)``
for attention, one for the indexer ring, ``1 + k`` (``2 + k + checkpoint`` in align mode) for
each recurrent-state group. vLLM reports the pool as ``int(num_blocks / pages_per_request *
max_model_len)`` tokens (``get_kv_cache_capacity``).

Mixed page sizes are packed block-outermost (the QSA state backend only supports BLNHC/BLHNC
layouts): ``_get_packed_kv_cache_groups`` in vllm/v1/core/kv_cache_planning.py, mirrored
here on buckets of layers (a bucket is a set of layers vLLM treats as one uniform type).
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class CacheBucket(BaseModel):
    """Layers of one uniform spec type: page bytes -> how many layers have that page."""

    model_config = ConfigDict(frozen=True)

    name: str
    pages: dict[int, int] = Field(description="page bytes -> layers with that page")
    state: bool = Field(description="Mamba or circular-buffer state: one page per request, never per token.")
    pages_per_request: int = Field(gt=0, description="Pages one request at max_model_len takes from each group.")

    @property
    def layers(self) -> int:
        return sum(self.pages.values())

    @property
    def balanced(self) -> bool:
        """One layer of each page size per pattern repeat (vLLM only splits those)."""
        return len(set(self.pages.values())) == 1

    @property
    def max_layers_per_page(self) -> int:
        return max(self.pages.values())


class CacheGroup(BaseModel):
    """One KV cache group: its layers share a block table."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    layers: int
    bytes_per_block: int = Field(description="Sum of this group's layer pages in one block.")
    pages_per_request: int


def approximate_gcd(values: list[int], *, lower_bound: int) -> int:
    """``_approximate_gcd``: the chunk size in [lower_bound, max] with least upward padding; ties to the larger."""
    best, best_pad = lower_bound, None
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best):
            best, best_pad = d, pad
    return best


def uniform_groups(bucket: CacheBucket) -> list[CacheGroup]:
    """Every layer has the same spec: one group holding all of them (``_get_kv_cache_groups_uniform_spec``)."""
    return [CacheGroup(bucket=bucket.name, layers=bucket.layers,
                       bytes_per_block=sum(p * n for p, n in bucket.pages.items()),
                       pages_per_request=bucket.pages_per_request)]


def packed_groups(buckets: list[CacheBucket]) -> list[CacheGroup]:
    """``_get_packed_kv_cache_groups`` for buckets of layers."""
    mixed = [b.max_layers_per_page for b in buckets if b.balanced and len(b.pages) > 1]
    min_repeats = max(mixed, default=0)
    repeats = (approximate_gcd([b.max_layers_per_page for b in buckets if b.balanced], lower_bound=min_repeats)
               if min_repeats else None)

    def groups_for(b: CacheBucket) -> int:
        return cdiv(b.max_layers_per_page, repeats) if b.balanced and repeats is not None else 1

    def widest(b: CacheBucket, n: int) -> int:
        return sum(cdiv(count, n) * page for page, count in b.pages.items())

    anchor = max((widest(b, b.layers if b.state else groups_for(b)) for b in buckets), default=0)
    groups: list[CacheGroup] = []
    for b in buckets:
        n = groups_for(b)
        if anchor and b.state:
            # A state group holds only the states a block already fits (it never widens the block).
            first_page = next(iter(b.pages))
            n = max(n, cdiv(b.layers, max(anchor // first_page, 1)))
        if n == 1:
            groups += uniform_groups(b)
            continue
        repeat_count = min(b.pages.values())  # vLLM zips the page-size lists: whole repeats only
        pattern_bytes = sum(b.pages)
        for i in range(n):
            in_group = len(range(i, repeat_count, n))
            groups.append(CacheGroup(bucket=b.name, layers=in_group * len(b.pages),
                                     bytes_per_block=in_group * pattern_bytes, pages_per_request=b.pages_per_request))
    return groups


def group_buckets(buckets: list[CacheBucket]) -> list[CacheGroup]:
    """One uniform group when every layer has one page size; packed groups otherwise."""
    pages = Counter(p for b in buckets for p in b.pages)
    if len(buckets) == 1 and len(pages) == 1:
        return uniform_groups(buckets[0])
    return packed_groups(buckets)


def bytes_per_block(groups: list[CacheGroup]) -> int:
    """Block-outermost: a block is as wide as the widest group (every group aliases it from byte 0)."""
    return max(g.bytes_per_block for g in groups)


def pages_per_request(groups: list[CacheGroup]) -> int:
    return sum(g.pages_per_request for g in groups)
