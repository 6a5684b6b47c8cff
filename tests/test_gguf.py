"""core.gguf: GGUF files read into the GPT. Tiny random Llamas written with gguf's GGUFWriter as llama.cpp
writes them (q/k rows permuted, each supported tensor type) read back equal to their float source; hostile
files refused with a message naming the problem; the real SmolLM2-135M-Instruct (Q4_1) read as transformers
reads it."""

import math
import struct

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGUFReader
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

from core.gguf import TYPES, GGUFError, load_gguf, unpermute
from core.pretrained import build, convert_llama_state, llama_config
from core.sample import generate
from playground.tabs.attention.patching import PAIRS
from support.gguf_files import (
    MERGES, SPECIAL, TINY, TINY_K, TOKENS, gguf_name, gguf_tensor, hf_config, llama_cpp_permute, random_blocks,
    smollm2_gguf, tiny_llama_state, write_gguf,
)

IDS = torch.tensor([[5, 70, 3, 200, 261, 17, 99, 42, 260, 8]])
K_TYPES = [t for t in TYPES if GGML_QUANT_SIZES[t][0] == 256]  # gguf dequantizes these, but cannot quantize to them
QUANTIZABLE = [t for t in TYPES if t not in K_TYPES]
# How far a quantized model's logits may be from the float model's: a multiple of how far its weights are from
# the float weights (both relative, in norm). The rounding error of a weight is its type's step / sqrt(12) (float16
# 2^-11 of the value, bfloat16 2^-8, Q8_0 a block's max|w| / 127, Q5 max|w| / 15, Q4 max|w| / 7), and a random
# two-block Llama of std 0.3 weights amplifies it: measured 6x to 15x for every type over four seeds. 20x leaves a
# margin; a file dequantized wrong fails the exact comparison before it.
AMPLIFICATION = 20


def float_model(state, dims=TINY):
    """The float source in this project's GPT (core.pretrained's Llama path, tested against transformers)."""
    config = llama_config(hf_config(tied="lm_head.weight" not in state, dims=dims))
    return build(config, convert_llama_state(state, config))


def dequantized_source(state, qtype):
    """What the file holds of `state`, dequantized and (q, k) unpermuted: what the loaded model must equal."""
    out = {}
    for name, w in state.items():
        written = gguf_tensor(name, w)
        kind = Q.F32 if w.dim() == 1 else qtype
        values = torch.from_numpy(dequantize(quantize(written, kind), kind).reshape(written.shape).copy())
        heads = TINY["n_head"] if "q_proj" in name else TINY["n_kv_head"] if "k_proj" in name else None
        out[name] = unpermute(values, heads) if heads else values
    return out


def test_unpermute_undoes_llama_cpps_permute_and_permute_changes_the_rows():
    w = torch.randn(48, 8)
    for heads, kv_heads in ((4, 4), (6, 2)):
        permuted = torch.from_numpy(llama_cpp_permute(w.numpy(), heads, kv_heads))
        rows = kv_heads if kv_heads != heads else heads
        assert not torch.equal(permuted, w)
        assert torch.equal(unpermute(permuted, rows), w)
    # each head's rows from (i, i + D/2) pairs to adjacent pairs: head 0 of 4 (D = 12) starts with rows 0, 6, 1, 7
    assert torch.equal(torch.from_numpy(llama_cpp_permute(w.numpy(), 4, None))[:4], w[[0, 6, 1, 7]])


@pytest.mark.parametrize("qtype", QUANTIZABLE, ids=lambda t: t.name)
def test_each_type_gguf_writes_reads_back_as_its_dequantized_float_source(tmp_path, qtype):
    state = tiny_llama_state()
    loaded = load_gguf(write_gguf(tmp_path / f"tiny.{qtype.name}.gguf", state, qtype))
    expected = float_model(dequantized_source(state, qtype))
    for name, p in expected.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], p), name
    assert loaded.model.config == expected.config
    with torch.no_grad():
        ours, reference = loaded.model(IDS)[0], float_model(state)(IDS)[0]
    source = dequantized_source(state, qtype)
    weight_error = math.sqrt(sum((source[k] - w).square().sum() for k, w in state.items()) /
                             sum(w.square().sum() for w in state.values() if w.dim() == 2))
    error = ((ours - reference).norm() / reference.norm()).item()
    assert error <= AMPLIFICATION * weight_error, f"{qtype.name}: logits off by {error:.3g}, weights by {weight_error:.3g}"
    assert (error > 0) == (qtype != Q.F32)


@pytest.mark.parametrize("qtype", K_TYPES, ids=lambda t: t.name)
def test_each_k_quantization_reads_as_gguf_dequantizes_it_and_as_transformers_reads_it(tmp_path, qtype):
    """gguf cannot quantize to K types: random blocks stand in, read back three ways (ours; gguf's own reader and
    dequantize, unpermuted; transformers' GGUF loader) to the same model."""
    import transformers

    path = write_gguf(tmp_path / f"tiny.{qtype.name}.gguf", tiny_llama_state(dims=TINY_K), qtype, dims=TINY_K,
                      encode=random_blocks())
    loaded = load_gguf(path)
    written = {tensor.name: torch.from_numpy(dequantize(tensor.data, tensor.tensor_type).copy())
               for tensor in GGUFReader(path).tensors}
    source = {}
    for name in tiny_llama_state(dims=TINY_K):
        w = written[gguf_name(name)]
        heads = TINY_K["n_head"] if "q_proj" in name else TINY_K["n_kv_head"] if "k_proj" in name else None
        source[name] = unpermute(w, heads) if heads else w
    for name, p in float_model(source, TINY_K).state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], p), name
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32)
    with torch.no_grad():
        ours, reference = loaded.model(IDS)[0], theirs.eval()(IDS).logits
    assert (ours - reference).abs().max() <= 1e-5 * reference.abs().max()


def test_a_float32_file_is_its_source_exactly_and_a_file_without_output_weight_ties_the_head(tmp_path):
    for tied in (False, True):
        state = tiny_llama_state(seed=1, tied=tied)
        loaded = load_gguf(write_gguf(tmp_path / f"tiny-{tied}.gguf", state))
        assert loaded.model.config.tie_weights is tied
        with torch.no_grad():
            assert torch.equal(loaded.model(IDS)[0], float_model(state)(IDS)[0])


def test_without_the_unpermute_the_model_would_read_plausible_nonsense(tmp_path):
    """The permutation matters: the file's q rows as they lie are not the source's."""
    state = tiny_llama_state()
    loaded = load_gguf(write_gguf(tmp_path / "tiny.gguf", state))
    q = loaded.model.state_dict()["blocks.0.attn.qkv.weight"][:TINY["n_embd"]]
    assert torch.equal(q, state["model.layers.0.self_attn.q_proj.weight"])
    assert not torch.equal(q, torch.from_numpy(gguf_tensor("model.layers.0.self_attn.q_proj.weight",
                                                           state["model.layers.0.self_attn.q_proj.weight"])))


def test_the_tokenizer_comes_from_the_metadata(tmp_path):
    tokenizer = load_gguf(write_gguf(tmp_path / "tiny.gguf", tiny_llama_state())).tokenizer
    the, space_the, is_ = (TOKENS.index(m.replace(" ", "")) for m in (MERGES[2], MERGES[3], MERGES[4]))
    ids = tokenizer.encode(f"the theis 42{SPECIAL}")
    # "the", " the", "is", " ", "4", "2" (digits one by one: the "smollm" split), the special token whole
    assert ids == [the, space_the, is_, TOKENS.index("Ġ"), TOKENS.index("4"), TOKENS.index("2"), TOKENS.index(SPECIAL)]
    assert tokenizer.decode(ids) == f"the theis 42{SPECIAL}"
    assert tokenizer.vocab_size == len(TOKENS)


# ---------------------------------------------------------------- files refused, each naming its problem


def test_an_unsupported_tensor_type_is_named(tmp_path):
    path = tmp_path / "iq2.gguf"
    path.write_bytes(header([("blk.0.ffn_up.weight", (256, 64), int(Q.IQ2_XXS), 0)]))
    with pytest.raises(GGUFError, match=r"iq2.gguf's tensor blk.0.ffn_up.weight is of type IQ2_XXS, which is not "
                                        r"read here \(read: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K"):
        load_gguf(path)


def test_a_truncated_file_is_named_truncated(tmp_path):
    path = write_gguf(tmp_path / "tiny.gguf", tiny_llama_state())
    data = path.read_bytes()
    path.write_bytes(data[:-100])  # the last tensor's end cut off
    with pytest.raises(GGUFError, match=r"tiny.gguf is truncated or its header is wrong: tensor \S+ .* past the end"):
        load_gguf(path)
    path.write_bytes(data[:200])  # inside the metadata
    with pytest.raises(GGUFError, match="tiny.gguf is truncated: it ends .* inside its header"):
        load_gguf(path)


def header(tensors, metadata=(("general.architecture", "llama"),), version=3) -> bytes:
    """A GGUF header by hand (string metadata; tensors as (name, dims in GGUF's order, type, offset)) and
    no tensor data: what a hostile file can claim."""
    def string(s):
        return struct.pack("<Q", len(s.encode())) + s.encode()
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata))
    for key, value in metadata:
        out += string(key) + struct.pack("<I", 8) + string(value)
    for name, dims, kind, offset in tensors:
        out += string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", kind, offset)
    return out + b"\0" * 64


def test_a_tensor_claiming_ten_gigabytes_is_refused_before_anything_is_allocated(tmp_path):
    path = tmp_path / "huge.gguf"
    path.write_bytes(header([("token_embd.weight", (40_960, 65_536), int(Q.F32), 0)]))  # 10.7 GB of float32
    with pytest.raises(GGUFError, match=r"token_embd.weight \(65536, 40960\) claims 10.7 GB at byte \d+, past "
                                        r"the end of the file \(\d+ bytes\)"):
        load_gguf(path)


def test_weights_over_the_cap_are_refused_naming_both_sizes(tmp_path):
    path = write_gguf(tmp_path / "tiny.gguf", tiny_llama_state())
    with pytest.raises(GGUFError, match=r"tiny.gguf's weights take 0.4 MB as float32, over the cap of 0.1 MB"):
        load_gguf(path, max_bytes=100_000)


def test_a_metadata_array_longer_than_the_file_is_refused_before_the_loop(tmp_path):
    path = tmp_path / "lying.gguf"
    array = struct.pack("<Q", 4) + b"toks" + struct.pack("<IIQ", 9, 8, 2**60)  # 2^60 strings claimed
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + array)
    with pytest.raises(GGUFError, match="toks claims 1,152,921,504,606,846,976 items"):
        load_gguf(path)


def test_tensors_that_do_not_fit_the_metadata_and_tensors_a_llama_has_not_are_named(tmp_path):
    state = tiny_llama_state()
    wrong = {**state, "model.layers.0.mlp.down_proj.weight": torch.randn(TINY["n_embd"], 64)}
    with pytest.raises(GGUFError, match=r"wrong.gguf's tensors do not fit its metadata: .* blocks.0.mlp.proj.weight "
                                        r"\(64, 64\) \(expected \(64, 96\)\)"):
        load_gguf(write_gguf(tmp_path / "wrong.gguf", wrong))
    qwen2 = tiny_llama_state(qkv_bias=True)  # Qwen2's q, k and v biases in a file that says Llama
    with pytest.raises(GGUFError, match="biased.gguf's tensors do not fit its metadata: the weights hold tensors "
                                        "this model has not: blocks.0.attn.qkv.bias, blocks.1.attn.qkv.bias"):
        load_gguf(write_gguf(tmp_path / "biased.gguf", qwen2))
    one = {**state, "model.layers.1.self_attn.q_proj.bias": torch.randn(TINY["n_embd"])}  # without k's and v's
    with pytest.raises(GGUFError, match="unexpected tensors in the Llama weights: model.layers.1.self_attn.q_proj.bias"):
        load_gguf(write_gguf(tmp_path / "one.gguf", one))
    other = {**state, "model.layers.0.self_attn.o_proj.bias": torch.randn(TINY["n_embd"])}
    with pytest.raises(GGUFError, match="other.gguf holds a tensor a Llama has not: blk.0.attn_output.bias"):
        load_gguf(write_gguf(tmp_path / "other.gguf", other))


def test_a_metadata_array_of_more_items_than_any_vocabulary_is_refused(tmp_path):
    path = tmp_path / "long.gguf"
    array = struct.pack("<Q", 4) + b"toks" + struct.pack("<IIQ", 9, 0, 2_000_000) + bytes(2_000_000)  # uint8s
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + array)
    with pytest.raises(GGUFError, match="long.gguf's metadata toks has 2,000,000 items, more than the 1,000,000 read"):
        load_gguf(path)


def test_another_architecture_is_refused_by_name(tmp_path):
    path = write_gguf(tmp_path / "phi.gguf", tiny_llama_state(), arch="phi3")
    with pytest.raises(GGUFError, match="phi.gguf is a 'phi3' model: only llama and qwen2 models are read yet"):
        load_gguf(path)


def test_a_qwen2_file_its_rows_unpermuted_and_its_biases_reads_as_transformers_reads_it(tmp_path):
    """llama.cpp writes a Qwen2's q and k rows as they are (its RoPE runs on halves, as ours): read as they lie,
    the biases stacked, equal to the float source and to what transformers' GGUF loader makes of the file."""
    import transformers

    state = tiny_llama_state(qkv_bias=True)
    loaded = load_gguf(write_gguf(tmp_path / "qwen.gguf", state, arch="qwen2", pre="qwen2"))
    config = llama_config(hf_config(model_type="qwen2"))
    assert loaded.model.config == config and config.qkv_bias and not config.bias
    expected = build(config, convert_llama_state(state, config))
    for name, p in expected.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], p), name
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="qwen.gguf", dtype=torch.float32)
    assert type(theirs).__name__ == "Qwen2ForCausalLM"
    with torch.no_grad():
        ours, reference = loaded.model(IDS)[0], theirs.eval()(IDS).logits
    assert (ours - reference).abs().max() <= 1e-5 * reference.abs().max()
    text = "Don't  stop: 42 theis\n\nthe"
    their_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file="qwen.gguf")
    assert loaded.tokenizer.encode(text) == their_tokenizer(text, add_special_tokens=False).input_ids


def test_not_a_gguf_file_an_unknown_split_and_an_empty_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x08\0\0\0\0\0\0\0{}      ")
    with pytest.raises(GGUFError, match="is not a GGUF file"):
        load_gguf(tmp_path / "model.safetensors")
    with pytest.raises(GGUFError, match=r"splits text as 'tekken', which is not read yet"):
        load_gguf(write_gguf(tmp_path / "tekken.gguf", tiny_llama_state(), pre="tekken"))
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(GGUFError, match="empty.gguf cannot be read"):
        load_gguf(tmp_path / "empty.gguf")
    with pytest.raises(GGUFError, match="cannot be read"):
        load_gguf(tmp_path / "absent.gguf")


def test_the_writer_quantizes_what_the_reader_dequantizes():
    """The round trip the tests above lean on is lossy for quantized types (else they would test nothing)."""
    w = tiny_llama_state()["model.layers.0.mlp.up_proj.weight"].numpy()
    for qtype in (Q.Q8_0, Q.Q4_0, Q.Q4_1):
        back = dequantize(quantize(w, qtype), qtype).reshape(w.shape)
        assert not np.array_equal(back, w) and np.abs(back - w).max() < 0.2


# ---------------------------------------------------------------- the real SmolLM2-135M-Instruct, Q4_1


@pytest.fixture(scope="module")
def smollm2():
    """Our reading of the real GGUF file (downloaded once into the cache: support.gguf_files)."""
    return load_gguf(smollm2_gguf())


@pytest.fixture(scope="module")
def transformers_smollm2():
    """(model, tokenizer): transformers' own reading of the same file, its GGUF code independent of ours."""
    import transformers  # only here: the other tests need none of it

    path = smollm2_gguf()
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    model.set_attn_implementation("eager")  # attention maps out
    return model.eval(), transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def test_real_smollm2_logits_and_attention_match_transformers_gguf_reader(smollm2, transformers_smollm2):
    ours, (theirs, _) = smollm2, transformers_smollm2
    assert (ours.model.config.n_layer, ours.model.config.n_head, ours.model.config.n_kv_head) == (30, 9, 3)
    ids = torch.tensor([ours.tokenizer.encode(PAIRS[1][0])])
    with torch.no_grad():
        expected = theirs(ids, output_attentions=True)
        logits, _, attentions = ours.model(ids, return_attention=True)
    assert (logits - expected.logits).abs().max() <= 1e-4 * expected.logits.abs().max()
    assert len(attentions) == len(expected.attentions) == 30
    for mine, reference in zip(attentions, expected.attentions):
        assert torch.allclose(mine, reference, atol=1e-4)


def test_real_smollm2_greedy_twenty_tokens_are_transformers(smollm2, transformers_smollm2):
    ours, (theirs, _) = smollm2, transformers_smollm2
    prompt = torch.tensor([ours.tokenizer.encode("The capital of France is")])
    with torch.no_grad():
        expected = theirs.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=2)
    assert torch.equal(generate(ours.model, prompt, 20, temperature=0), expected)


def test_real_smollm2_tokenizer_is_transformers_tokenizer_of_the_file(smollm2, transformers_smollm2):
    ours, (_, tokenizer) = smollm2, transformers_smollm2
    for text in [*PAIRS[1], "Année 2024: 12345 + 678 = ?\n\n\tdéjà vu 🙂", "<|im_start|>user\nHi!<|im_end|>"]:
        ids = ours.tokenizer.encode(text)
        assert ids == tokenizer(text, add_special_tokens=False).input_ids, text
        assert ours.tokenizer.decode(ids) == text
    assert ours.tokenizer.encode("<|im_start|>") == [1]  # a special token whole, as the chat template writes it


def test_real_smollm2_answers_the_names_pair_and_the_corruption_flips_it(smollm2):
    ours = smollm2
    clean, corrupted = (ours.tokenizer.encode(text) for text in PAIRS[1])
    mary, john = (ours.tokenizer.encode(name) for name in (" Mary", " John"))
    assert len(clean) == len(corrupted) == 14 and len(mary) == len(john) == 1
    with torch.no_grad():
        logits = ours.model(torch.tensor([clean, corrupted]))[0][:, -1]
    difference = logits[:, mary[0]] - logits[:, john[0]]
    assert difference[0] > 1 and difference[1] < -1, difference
