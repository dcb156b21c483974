"""The generated Qwen4Exp: shaped like the real attention, a config transformers and vLLM accept,
weights in the checkpoint layout with the init the issue asks for, an MTP layer vLLM loads, and PLE
layers whose names, shapes, dtypes and hash layout are read from vLLM 0.33.0's own sources, with a
table that the ple-mmap patch's storage layer maps in place from the generated safetensors."""

from __future__ import annotations

import ast
import json
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.engine import model as gen

TINY = gen.SmallQwen4Exp(
    hidden_size=64, num_hidden_layers=4, qsa_every=2, indexer_n_heads=4, linear_num_key_heads=2,
    linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32, num_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64, hc_lowrank=16,
    max_position_embeddings=4096, vocab_pad=64,
    # two of the two GDN layers, 16 heads x 8 wide (16 B rows), ~2 x 8.3k rows in 8 shards each
    ple_layer_ids=(1, 3), ple_embed_dim=128, ngram_vocab_size_base=512, split_ngram_parts=8,
)


def test_default_attention_is_the_real_models():
    spec = gen.SmallQwen4Exp()
    assert (spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim) == (24, 2, 256)
    assert (spec.indexer_budget, spec.indexer_compress_ratio) == (2048, 4)  # the real QSA budget
    assert spec.topk in gen.SUPPORTED_TOPK
    assert spec.layer_types.count("full_attention") >= 3 and "linear_attention" in spec.layer_types
    assert spec.layer_types[-1] == "full_attention"  # the MTP layer copies the last QSA layer's shape


def test_a_topk_the_compiled_kernel_lacks_is_refused():
    with pytest.raises(ValueError, match="cooperative_topk"):
        gen.check_spec(gen.SmallQwen4Exp(indexer_budget=1024, indexer_compress_ratio=4))  # k = 256


def test_an_indexer_the_upstream_prefill_kernel_cannot_fit_on_sm90_is_refused():
    """At 16 indexer heads every server dies in _qsa_mqa_paged_prefill_kernel (303,104 B > 232,448 B)."""
    assert gen.indexer_prefill_smem(gen.SmallQwen4Exp(indexer_n_heads=16)) == 303_104
    with pytest.raises(ValueError, match="shared memory"):
        gen.check_spec(gen.SmallQwen4Exp(indexer_n_heads=16))
    gen.check_spec(gen.SmallQwen4Exp())


def test_config_carries_what_vllm_reads():
    cfg = gen.text_config(gen.SmallQwen4Exp(), vocab_size=49280, bos=1, eos=2, pad=2)
    assert cfg["architectures"] == ["Qwen4ExpForCausalLM"] and cfg["model_type"] == "qwen4_exp_text"
    # vLLM 0.33.0's GDN layer asserts output_gate_type is set (None killed the first H200 start)
    assert cfg["output_gate_type"] == "silu"
    assert cfg["mtp_num_hidden_layers"] == 1
    assert cfg["rope_parameters"]["partial_rotary_factor"] * cfg["head_dim"] <= cfg["indexer_head_dim"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    d = tmp_path_factory.mktemp("tok")
    vocab = {w: i for i, w in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>", *"abcdefgh", "river", "stone"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>"}))
    (d / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    return d


@pytest.fixture(scope="module")
def generated(tokenizer_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("m") / "model"
    return gen.generate(tokenizer_dir=tokenizer_dir, out=out, seed=0, spec=TINY), out


def tensors(out: Path) -> dict:
    from safetensors import safe_open

    found = {}
    for f in out.glob("*.safetensors"):
        with safe_open(str(f), "pt") as h:
            found.update({k: h.get_tensor(k) for k in h.keys()})
    return found


def test_generated_dir_is_complete_and_loads_in_transformers(generated):
    from transformers import AutoConfig, AutoTokenizer

    result, out = generated
    assert (out / gen.MARKER).is_file()
    saved = json.loads((out / "config.json").read_text())
    assert saved["layer_types"] == TINY.layer_types  # the real checkpoint's spelling
    assert saved["output_gate_type"] == "silu"
    cfg = AutoConfig.from_pretrained(out)
    assert cfg.model_type == "qwen4_exp_text"
    assert all(t in ("linear_attention", "qwen_sparse_attention", "indexed_attention") for t in cfg.layer_types)
    tok = AutoTokenizer.from_pretrained(out)
    assert all(tok.convert_tokens_to_ids(t) is not None for t in gen.REASONING_TOKENS)
    assert result.vocab_size % TINY.vocab_pad == 0 and result.vocab_size >= len(tok)


def test_weights_follow_the_seeded_init(generated):
    _, out = generated
    t = tensors(out)
    q = t["model.layers.1.self_attn.q_proj.weight"].float()
    assert q.shape == (24 * 256 * 2, 64)  # 24 heads x 256, doubled by the output gate
    assert 0.015 < q.std().item() < 0.025
    norm = t["model.layers.1.self_attn.q_norm.weight"].float()
    assert norm.abs().max().item() == 0.0  # zero-centred RMSNorm: scales by exactly 1
    assert t["model.layers.1.self_attn.k_proj.weight"].shape == (2 * 256, 64)


def test_mtp_layer_is_numbered_from_zero_in_checkpoint_layout(generated):
    """vLLM 0.33.0's Qwen4ExpMultiTokenPredictor numbers its own layers from 0: a checkpoint naming
    the drafter after the main stack (mtp.layers.<num_hidden_layers>) fails to load on the H200, every
    server exiting with `There is no module or parameter named 'layers.8' in Qwen4ExpMultiTokenPredictor`."""
    _, out = generated
    t = tensors(out)
    n = TINY.num_hidden_layers
    for name in ("mtp.fc_embedding.weight", "mtp.fc_hidden.weight", "mtp.pre_fc_norm_embedding.weight",
                 "mtp.pre_fc_norm_hidden.weight", "mtp.layers.0.self_attn.q_proj.weight",
                 "mtp.layers.0.self_attn.indexer.index_qk_proj.weight",
                 "mtp.layers.0.mlp.experts.0.gate_proj.weight", "mtp.hyper_connection_mixer.hc_norm.weight"):
        assert name in t, name
    assert {k.split(".")[2] for k in t if k.startswith("mtp.layers.")} == {"0"}
    # redrawn, not a copy of the main layer it is shaped after
    main, mtp = t[f"model.layers.{n - 1}.self_attn.q_proj.weight"], t["mtp.layers.0.self_attn.q_proj.weight"]
    assert main.shape == mtp.shape and not (main == mtp).all()
    assert t["mtp.pre_fc_norm_hidden.weight"].shape == (64 * TINY.hc_count,)


def test_same_seed_same_weights(tokenizer_dir, generated, tmp_path):
    _, first = generated
    gen.generate(tokenizer_dir=tokenizer_dir, out=tmp_path / "again", seed=0, spec=TINY)
    a, b = tensors(first), tensors(tmp_path / "again")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_a_model_is_regenerated_over_its_own_output_but_never_over_a_users_folder(tokenizer_dir, tmp_path):
    out = tmp_path / "m"
    gen.generate(tokenizer_dir=tokenizer_dir, out=out, seed=0, spec=TINY)
    gen.generate(tokenizer_dir=tokenizer_dir, out=out, seed=1, spec=TINY)  # its own marker: replaced
    assert json.loads((out / gen.MARKER).read_text())["seed"] == 1
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    from benchmarks.engine.errors import EngineHarnessError

    with pytest.raises(EngineHarnessError, match="refusing to replace"):
        gen.generate(tokenizer_dir=tokenizer_dir, out=mine, seed=0, spec=TINY)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "mine"]  # no staging folder left


# --- PLE: what vLLM 0.33.0 reads, from its own sources --------------------------------------------

def test_default_ple_is_a_small_table_on_gdn_layers():
    spec = gen.SmallQwen4Exp()
    gen.check_spec(spec)
    assert spec.ple_layer_ids and all(spec.layer_types[i - 1] == "linear_attention" for i in spec.ple_layer_ids)
    assert (spec.ngram_size, spec.heads_per_ngram, spec.split_ngram_parts) == (3, 8, 512)  # the real layout
    assert 10 << 20 < gen.ple_table_bytes(spec) <= gen.MAX_PLE_TABLE_BYTES


@pytest.mark.parametrize(("change", "says"), [
    ({"ple_layer_ids": (1, 2)}, r"ple_layer_ids \[2\] are QSA layers.*choose from \[1, 3, 5, 7\]"),
    ({"ple_layer_ids": (0, 3)}, r"ple_layer_ids \[0\] are outside 1\.\.8"),
    ({"ple_layer_ids": (3, 3)}, "repeats a layer"),
    ({"ple_embed_dim": 1000}, r"ple_embed_dim 1000 is not divisible by .* = 16"),
    ({"ngram_size": 1}, "ngram_size >= 2"),
    ({"ngram_vocab_size_base": 20_000_000}, "lower ngram_vocab_size_base"),  # the real model's base
])
def test_an_invalid_ple_spec_is_refused_naming_the_field_and_the_fix(change, says):
    with pytest.raises(ValueError, match=says):
        gen.check_spec(gen.SmallQwen4Exp(**change))


def _class_node(path: Path, name: str) -> ast.ClassDef:
    return next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == name)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.fixture(scope="module")
def vllm_qwen4(patched_tree) -> Path:
    """The patched engine's qwen4_exp sources (nvidia/ is copied whole, common/ple_mmap.py is the patch's)."""
    return patched_tree / "vllm" / "models" / "qwen4_exp"


@pytest.fixture(scope="module")
def vllm_hash(vllm_qwen4):
    """vLLM's own Qwen4ExpNGramEmbedding hash layout (_make_vocab_layout, _make_layer_multipliers and
    their helpers), cut unchanged from nvidia/ngram_embedding.py: the class itself needs vLLM's
    distributed state, but these are pure classmethods."""
    path = vllm_qwen4 / "nvidia" / "ngram_embedding.py"
    lines = path.read_text().splitlines()
    cls = _class_node(path, "Qwen4ExpNGramEmbedding")
    wanted = {"_splitmix64", "_is_prime_64", "_nth_prime_after", "_make_layer_multipliers", "_make_vocab_layout"}
    parts = []
    for node in cls.body:
        if isinstance(node, ast.Assign) or (isinstance(node, ast.FunctionDef) and node.name in wanted):
            first = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
            parts.append(textwrap.dedent("\n".join(lines[first - 1:node.end_lineno])))
    assert len(parts) >= len(wanted) + 5, "vLLM's Qwen4ExpNGramEmbedding changed shape"
    namespace: dict = {}
    exec(compile("class VllmHash:\n" + textwrap.indent("\n".join(parts), "    "), str(path), "exec"), namespace)
    return namespace["VllmHash"]


def test_ple_table_rows_are_vllms(vllm_hash):
    """vLLM sizes each PLE table from the config (nvidia/ngram_embedding.py: _make_vocab_layout, then
    round_up to make_ngram_vocab_size_divisible_by) and refuses shards of another size."""
    for spec in (gen.SmallQwen4Exp(), TINY):
        for dense in range(len(spec.ple_layer_ids)):
            sizes, _, total = vllm_hash._make_vocab_layout(
                ngram_vocab_size_base=spec.ngram_vocab_size_base, ngram_heads=spec.ngram_heads, ple_dense_layer_id=dense)
            assert gen.ngram_head_sizes(spec, dense_layer=dense) == sizes
            divisor = spec.make_ngram_vocab_size_divisible_by
            assert gen.ple_table_rows(spec, dense_layer=dense) == -(-total // divisor) * divisor


def _ple_modules_vllm_builds(vllm_qwen4: Path) -> set[str]:
    """The submodules Qwen4ExpPLELayer.__init__ assigns (self.<name> = SomeClass(...))."""
    init = _method(_class_node(vllm_qwen4 / "nvidia" / "ple_layer.py", "Qwen4ExpPLELayer"), "__init__")
    names = set()
    for node in ast.walk(init):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(target := node.targets[0], ast.Attribute) and not target.attr.startswith("_")):
            func = node.value.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called[:1].isupper():
                names.add(target.attr)
    return names


def _stacked_ple_names(vllm_qwen4: Path) -> dict[str, str]:
    """model.py's _EXTRA_WEIGHTS_MAPPER: checkpoint `ple.key_proj` / `ple.value_proj` -> `ple.kv_proj`."""
    tree = ast.parse((vllm_qwen4 / "nvidia" / "model.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_EXTRA_WEIGHTS_MAPPER")
    stacked = ast.literal_eval(next(k.value for k in node.value.keywords if k.arg == "orig_to_new_stacked"))
    return {k.removeprefix("ple."): v[0].removeprefix("ple.") for k, v in stacked.items() if k.startswith("ple.")}


def _buffers_vllm_loads(vllm_qwen4: Path) -> set[str]:
    init = _method(_class_node(vllm_qwen4 / "nvidia" / "ngram_embedding.py", "Qwen4ExpNGramEmbedding"), "__init__")
    return {n.args[0].value for n in ast.walk(init)
            if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "register_buffer"}


def test_ple_checkpoint_has_the_names_shapes_and_dtypes_vllm_loads(generated, vllm_qwen4, vllm_hash):
    import torch

    _, out = generated
    t = tensors(out)
    cfg = json.loads((out / "config.json").read_text())
    for key in gen.PLE_CONFIG_KEYS:  # every key vLLM's PLE layer reads, written out (not left to defaults)
        assert cfg[key] == (sorted(TINY.ple_layer_ids) if key == "ple_layer_ids" else getattr(TINY, key)), key
    h, hc = TINY.hidden_size, TINY.hidden_size * TINY.hc_count
    modules, stacked, buffers = _ple_modules_vllm_builds(vllm_qwen4), _stacked_ple_names(vllm_qwen4), _buffers_vllm_loads(vllm_qwen4)
    assert modules == {"ple_embedding", "kv_proj", "norm_key", "norm_query", "norm_conv", "conv1d"}
    assert stacked == {"key_proj": "kv_proj", "value_proj": "kv_proj"}
    assert buffers == {"layer_multipliers", "ngram_heads_vocab_sizes", "ngram_heads_offsets"}
    ple_layers = sorted({int(k.split(".")[2]) for k in t if ".ple." in k})
    assert ple_layers == [i - 1 for i in sorted(TINY.ple_layer_ids)]  # one-indexed ids -> layers.<id - 1>
    for dense, layer in enumerate(ple_layers):
        prefix = f"model.layers.{layer}.ple."
        names = {k[len(prefix):] for k in t if k.startswith(prefix)}
        assert {stacked.get(n.split(".")[0], n.split(".")[0]) for n in names} == modules
        # ple_layer.py: kv_proj = MergedColumnParallelLinear(ple_embed_dim, [hc_hidden, hidden]); grouped norms
        # of hc_hidden; a depthwise nn.Conv1d(hc_hidden, hc_hidden, ple_conv_kernel_size, groups=hc_hidden)
        shapes = {"key_proj.weight": (hc, TINY.ple_embed_dim), "value_proj.weight": (h, TINY.ple_embed_dim),
                  "norm_key.weight": (hc,), "norm_query.weight": (hc,), "norm_conv.weight": (hc,),
                  "conv1d.weight": (hc, 1, TINY.ple_conv_kernel_size)}
        for name, shape in shapes.items():
            assert tuple(t[prefix + name].shape) == shape and t[prefix + name].dtype == torch.bfloat16, name
        # The hash buffers: vLLM copies them over its own after a shape check; they must be its values too.
        emb = prefix + "ple_embedding."
        sizes, offsets, _ = vllm_hash._make_vocab_layout(
            ngram_vocab_size_base=TINY.ngram_vocab_size_base, ngram_heads=TINY.ngram_heads, ple_dense_layer_id=dense)
        multipliers = vllm_hash._make_layer_multipliers(
            ngram_size=TINY.ngram_size, unigram_vocab_size=cfg["vocab_size"], seed=cfg["seed"], ple_dense_layer_id=dense)
        assert {n.removeprefix("ple_embedding.") for n in names if not n.startswith("ple_embedding.ngram_embedding.")
                and n.startswith("ple_embedding.")} == buffers
        assert t[emb + "ngram_heads_vocab_sizes"].tolist() == sizes and t[emb + "ngram_heads_offsets"].tolist() == offsets
        assert t[emb + "layer_multipliers"].tolist() == multipliers and t[emb + "layer_multipliers"].dtype == torch.int64
        # Qwen4ExpNGramEmbedding.load_weights: shard_<i>.weight of ceil(rows / split_ngram_parts) rows each.
        rows = gen.ple_table_rows(TINY, dense_layer=dense)
        per = -(-rows // TINY.split_ngram_parts)
        shards = sorted((k for k in t if k.startswith(emb + "ngram_embedding.shard_")), key=lambda k: int(k.split(".")[-2][6:]))
        assert [k.split(".")[-2] for k in shards] == [f"shard_{i}" for i in range(TINY.split_ngram_parts)]
        assert [tuple(t[k].shape) for k in shards] == [(min(per, rows - i * per), TINY.ple_row_width) for i in range(len(shards))]
        assert all(t[k].dtype == torch.bfloat16 for k in shards)  # the config dtype: vLLM's table dtype
        table = torch.cat([t[k] for k in shards]).float()
        assert 0.015 < table.std().item() < 0.025 and abs(table.mean().item()) < 0.002  # the seeded normal init
    assert not any(".ple." in k for k in t if k.startswith("mtp."))  # the drafter copies a QSA layer: no PLE


@pytest.fixture(scope="module")
def ple_mmap(patched_tree):
    """The patch's common/ple_mmap.py (numpy/torch storage layer), imported by bundle/patches/ple_loader.py
    with the standard logger for vllm.logger; sys.modules is restored afterwards."""
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    try:
        import ple_loader

        yield ple_loader.load_ple_mmap(patched_tree)
    finally:
        for name in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def test_the_ple_mmap_storage_maps_the_generated_table_in_place(generated, ple_mmap):
    """What Qwen4ExpPLEMappedHostEmbedding._open_storage does at load, on the generated checkpoint: scan
    the safetensors headers for this layer's table (its key from the module prefix vLLM builds), find
    it mappable in place (bf16 rows, the table dtype), map this rank's rows and read them back."""
    import numpy as np
    import torch

    _, out = generated
    t = tensors(out)
    files = ple_mmap.checkpoint_files(out)
    assert {f.name for f in files} == {p.name for p in out.glob("*.safetensors")}
    for dense, layer_id in enumerate(sorted(TINY.ple_layer_ids)):
        # nvidia/model.py + ple_layer.py + ngram_embedding.py: prefix model.layers.<i>.ple.ple_embedding.ngram_embedding
        key = ple_mmap.table_key(f"model.layers.{layer_id - 1}.ple.ple_embedding.ngram_embedding")
        rows = gen.ple_table_rows(TINY, dense_layer=dense)
        spec = ple_mmap.TableSpec("weight", torch.bfloat16, TINY.ple_row_width)
        tables, _ = ple_mmap.scan_checkpoint(files, key=key, specs=[spec], org_vocab_size=rows)
        table = tables["weight"]
        assert table.in_place and len(table.sources) == TINY.split_ngram_parts
        # the control: a table in another dtype would need a per-rank table file built at load
        other, _ = ple_mmap.scan_checkpoint(files, key=key, specs=[ple_mmap.TableSpec("weight", torch.float16, TINY.ple_row_width)],
                                            org_vocab_size=rows)
        assert not other["weight"].in_place
        full = torch.cat([t[f"model.layers.{layer_id - 1}.ple.ple_embedding.ngram_embedding.shard_{i}.weight"]
                          for i in range(TINY.split_ngram_parts)]).view(torch.uint8).numpy()
        ids = np.array([0, 1, table.shard_rows - 1, table.shard_rows, rows // 2, rows - 1], dtype=np.int64)
        for start, end in ((0, rows), (0, rows // 2), (rows // 2, rows)):  # TP1 and each TP2 rank's range
            mapped = ple_mmap.map_checkpoint_table(table, vocab_start=start, vocab_end=end, key=key)
            assert mapped.description.startswith("in place")
            assert {s.filemap.path for s in mapped.segments if s is not None} <= {str(f) for f in files}
            owned = (ids >= start) & (ids < end)
            expected = np.where(owned[:, None], full[ids], 0)  # other ranks' rows read as zeros
            assert np.array_equal(mapped.rows(ids.tolist()), expected)


def test_the_gather_path_bounds_the_thread_switch_interval_without_raising_it(ple_mmap):
    """The gather path's host functions stall the GPU stream until they hold the GIL, so HostGather lowers
    the process's switch interval to VLLM_PLE_MMAP_SWITCH_INTERVAL_US; it never raises a lower one an
    embedding process set itself, and 0 leaves Python's own."""
    saved = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        ple_mmap.bound_switch_interval(0)
        assert sys.getswitchinterval() == pytest.approx(0.005)
        ple_mmap.bound_switch_interval(100)
        assert sys.getswitchinterval() == pytest.approx(100e-6)
        ple_mmap.bound_switch_interval(1000)
        assert sys.getswitchinterval() == pytest.approx(100e-6)
    finally:
        sys.setswitchinterval(saved)
