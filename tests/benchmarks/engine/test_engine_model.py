"""The generated Qwen4Exp: shaped like the real attention, a config transformers and vLLM accept,
weights in the checkpoint layout with the init the issue asks for, and an MTP layer vLLM loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.engine import model as gen

TINY = gen.SmallQwen4Exp(
    hidden_size=64, num_hidden_layers=4, qsa_every=2, indexer_n_heads=4, linear_num_key_heads=2,
    linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32, num_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64, hc_lowrank=16,
    max_position_embeddings=4096, vocab_pad=64,
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
    """Call 22: every server died in _qsa_mqa_paged_prefill_kernel at 16 heads (303,104 B > 232,448 B)."""
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
    the drafter after the main stack (mtp.layers.<num_hidden_layers>) fails to load on the H200
    (evidence/engine-h200/runs/call12-summary.json)."""
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
    from builder.errors import EngineHarnessError

    with pytest.raises(EngineHarnessError, match="refusing to replace"):
        gen.generate(tokenizer_dir=tokenizer_dir, out=mine, seed=0, spec=TINY)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "mine"]  # no staging folder left
