"""GGUF files (llama.cpp's format, which Ollama and LM Studio keep their models in) read into this
project's GPT: Llama-architecture models (general.architecture "llama", or "qwen2": Llama's layout with biases
on the query, key and value projections), dequantized to float32.

    smol = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")    # a Pretrained, as core.pretrained's loaders give
    logits, _ = smol.model(torch.tensor([smol.tokenizer.encode("Hello")]))

A GGUF file is a header (metadata as typed key/values, then each tensor's name, shape, type and offset)
followed by the tensors' bytes. Everything is checked from the header before anything is allocated:
every tensor must lie inside the file, be of a type read here (`TYPES`) and the float32 model must fit
under `max_bytes`. The weights are then dequantized with the `gguf` package and mapped onto Hugging Face
Llama's names, so `core.pretrained`'s Llama path does the rest (its config checks, the q/k/v and gate/up
stacking):

    GGUF (llama.cpp)                               Hugging Face Llama
    token_embd, output_norm, output                model.embed_tokens, model.norm, lm_head (absent: tied)
    blk.{i}.attn_norm, ffn_norm                    model.layers.{i}.input_layernorm, .post_attention_layernorm
    blk.{i}.attn_q, attn_k, attn_v, attn_output    model.layers.{i}.self_attn.q_proj, k_proj, v_proj, o_proj
    blk.{i}.ffn_gate, ffn_up, ffn_down             model.layers.{i}.mlp.gate_proj, up_proj, down_proj

RoPE layouts: llama.cpp's Llama rotates adjacent channel pairs (2i, 2i+1), Hugging Face's (and this GPT)
the halves (i, i + D/2), so llama.cpp's converter permutes the query and key rows of each head when it
writes a Llama (`permute` in convert_hf_to_gguf.py); `unpermute` undoes it. A Qwen2's rows are written as
they are: llama.cpp rotates its halves. A wrong unpermute still runs
and reads plausible nonsense, hence the tests against transformers' own GGUF reader.

The tokenizer comes from the metadata too: tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, merges,
special tokens), split as tokenizer.ggml.pre says (`SPLITS`), built with Hugging Face `tokenizers`.

`gguf_models(folder)` names the models a folder holds: its *.gguf files by their stem, and when it is an Ollama
models folder (~/.ollama/models), Ollama's models by name:tag. Ollama keeps a manifest per model at
manifests/registry.ollama.ai/library/NAME/TAG, a JSON list of layers; the layer of mediaType
application/vnd.ollama.image.model is the GGUF file, blobs/sha256-HEX for its digest sha256:HEX.

Never imports `transformers`, gradio, plotly or `playground`.
"""

from __future__ import annotations

import json
import math
import mmap
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tokenizers
import torch
from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType
from gguf.quants import dequantize
from tokenizers import decoders, pre_tokenizers

from core.pretrained import Pretrained, build, convert_llama_state, llama_config
from core.tokenizers import HFTokenizer

# The tensor types read here: floats, llama.cpp's first quantizations (blocks of 32) and its K quantizations (blocks of
# 256; Ollama's usual Q4_K_M files hold Q4_K and Q6_K). The others (IQ*, TQ*, MXFP4, ...) are refused by name.
TYPES = tuple(GGMLQuantizationType[name] for name in (
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"))
# general.architecture values read here (Mistral and SmolLM2 files say "llama"), and whether llama.cpp permuted their
# query and key rows: it does for a Llama, whose RoPE it runs on adjacent pairs, not for a Qwen2 (halves, as here).
ARCHITECTURES = {"llama": True, "qwen2": False}
DEFAULT_MAX_BYTES = 2 * 2**30  # the float32 weights' cap: a model of 500M parameters
VERSIONS = (2, 3)  # GGUF versions with 64-bit counts (version 1 is long gone)
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
MAX_ITEMS = 1_000_000  # a metadata array's items: the largest vocabularies have 256k tokens and as many merges

# Metadata value types: their struct formats (strings and arrays are read apart).
SCALARS = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
           GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
           GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
           GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}

# {arch}.* keys -> Hugging Face Llama config.json keys (the first five required).
CONFIG_KEYS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size",
               "feed_forward_length": "intermediate_size", "attention.head_count": "num_attention_heads",
               "context_length": "max_position_embeddings", "attention.head_count_kv": "num_key_value_heads",
               "attention.layer_norm_rms_epsilon": "rms_norm_eps", "rope.freq_base": "rope_theta"}
REQUIRED_KEYS = tuple(CONFIG_KEYS)[:5]

# GGUF tensor names -> Hugging Face Llama names; {i} is a block.
TENSOR_NAMES = {
    "token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
    "blk.{i}.attn_norm": "model.layers.{i}.input_layernorm", "blk.{i}.ffn_norm": "model.layers.{i}.post_attention_layernorm",
    "blk.{i}.attn_q": "model.layers.{i}.self_attn.q_proj", "blk.{i}.attn_k": "model.layers.{i}.self_attn.k_proj",
    "blk.{i}.attn_v": "model.layers.{i}.self_attn.v_proj", "blk.{i}.attn_output": "model.layers.{i}.self_attn.o_proj",
    "blk.{i}.ffn_gate": "model.layers.{i}.mlp.gate_proj", "blk.{i}.ffn_up": "model.layers.{i}.mlp.up_proj",
    "blk.{i}.ffn_down": "model.layers.{i}.mlp.down_proj",
}

# tokenizer.ggml.pre -> how text is split before byte-level BPE (llama.cpp's pre-tokenizers, as `tokenizers`
# spells them); "default" is GPT-2's split, what a file that names none gets.
GPT2_SPLIT = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
SPLITS = {
    "default": [GPT2_SPLIT],
    "gpt-2": [GPT2_SPLIT],
    "smollm": [pre_tokenizers.Digits(individual_digits=True), GPT2_SPLIT],  # each digit a token of its own
    "qwen2": [pre_tokenizers.Split(tokenizers.Regex(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
        behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)],
}
BIASED = ("attn_q", "attn_k", "attn_v")  # the tensors that may have a bias (Qwen2's), as GGUF names them
CONTROL = 3  # tokenizer.ggml.token_type of a special token (<|im_start|>, <|endoftext|>)


def load_gguf(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Pretrained:
    """A Llama-architecture model from a GGUF file, its weights dequantized to float32, its tokenizer from
    the file's metadata. Raises ValueError naming the problem for any file it cannot read (not GGUF,
    truncated, another architecture, a tensor type not in TYPES, weights over `max_bytes` as float32)."""
    path = Path(path).expanduser()
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            metadata, tensors = read_header(data, path.name, max_bytes)
            hf = hf_config(metadata, tensors, path.name)  # the refusals that need no weights come first
            config, tokenizer = llama_config(hf), gguf_tokenizer(metadata, path.name)
            if tokenizer.vocab_size > config.vocab_size:
                raise GGUFError(f"{path.name}'s tokenizer has {tokenizer.vocab_size:,} tokens, more than the "
                                f"model's vocabulary of {config.vocab_size:,}")
            names = {name: hf_name(name, path.name) for name in tensors}  # every name checked before any read
            weights = {names[name]: torch.from_numpy(read_tensor(data, tensor)) for name, tensor in tensors.items()}
    except GGUFError:
        raise
    except (OSError, ValueError) as error:  # mmap of an empty file raises ValueError; llama_config's refusals
        raise GGUFError(f"{path} cannot be read: {error}") from None
    for name, heads in (("q_proj", hf["num_attention_heads"]), ("k_proj", hf["num_key_value_heads"])):
        for layer in range(config.n_layer if ARCHITECTURES[metadata["general.architecture"]] else 0):
            key = f"model.layers.{layer}.self_attn.{name}.weight"  # llama.cpp's RoPE layout back to Hugging Face's
            if key in weights and weights[key].shape[0] % (2 * heads) == 0:  # else build names the wrong shape
                weights[key] = unpermute(weights[key], heads)
    try:
        model = build(config, convert_llama_state(weights, config))
    except ValueError as error:  # its messages speak of Hugging Face's config.json: here it is the metadata
        raise GGUFError(f"{path.name}'s tensors do not fit its metadata: {error}") from None
    return Pretrained(model, tokenizer, str(path), path.parent)


class GGUFError(ValueError):
    """A file that is not a GGUF model this project reads; the message names the problem."""


def unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """A Llama's q_proj or k_proj rows (out, in) as llama.cpp writes them back to Hugging Face's order: the
    inverse of convert_hf_to_gguf.py's `permute`, which takes each head's rows from the halves layout
    (i, i + D/2) to the pairs layout (2i, 2i+1) by reshaping them (heads, 2, D/2) and swapping the last two."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


# ---------------------------------------------------------------- the header


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor's bytes are in the file, and how to read them."""

    shape: tuple[int, ...]  # in torch's order (GGUF writes it reversed)
    kind: GGMLQuantizationType
    start: int  # from the start of the file
    size: int  # in bytes


class Cursor:
    """Reads a GGUF header front to back, every read checked against the end of the file."""

    def __init__(self, data: mmap.mmap, name: str) -> None:
        self.data, self.name, self.at = data, name, 0

    def take(self, n: int, what: str) -> int:
        if self.at + n > len(self.data):
            raise GGUFError(f"{self.name} is truncated: it ends ({len(self.data):,} bytes) inside its header, in {what}")
        self.at += n
        return self.at - n

    def scalar(self, fmt: str, what: str):
        return struct.unpack_from(fmt, self.data, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.scalar("<Q", what)
        start = self.take(n, what)
        try:
            return self.data[start:start + n].decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{self.name}'s header holds a string that is not UTF-8, in {what}") from None

    def value(self, kind: int, key: str):
        if kind == GGUFValueType.STRING:
            return self.string(key)
        if kind == GGUFValueType.ARRAY:
            item, n = self.scalar("<I", key), self.scalar("<Q", key)
            if item == GGUFValueType.ARRAY:
                raise GGUFError(f"{self.name}'s metadata {key} is an array of arrays, which no model needs")
            if n > len(self.data) - self.at:  # each item takes a byte at least: refused before the loop
                raise GGUFError(f"{self.name} is truncated or its header is wrong: {key} claims {n:,} items, "
                                f"more than the {len(self.data) - self.at:,} bytes left")
            if n > MAX_ITEMS:
                raise GGUFError(f"{self.name}'s metadata {key} has {n:,} items, more than the {MAX_ITEMS:,} read")
            return [self.value(item, key) for _ in range(n)]
        if kind not in SCALARS:
            raise GGUFError(f"{self.name}'s metadata {key} has an unknown value type {kind}")
        value = self.scalar(SCALARS[GGUFValueType(kind)], key)
        # A float32 as the shortest decimal that rounds to it: the 1e-05 the converter was given, not 9.99999974e-06.
        return float(str(np.float32(value))) if kind == GGUFValueType.FLOAT32 else value


def read_header(data: mmap.mmap, name: str, max_bytes: int) -> tuple[dict, dict[str, TensorInfo]]:
    """(the metadata, the tensors by name) of a GGUF file, every tensor checked to lie in the file, be of
    a type in TYPES, and the whole to fit `max_bytes` as float32."""
    cursor = Cursor(data, name)
    if len(data) < 4 or struct.unpack_from("<I", data)[0] != GGUF_MAGIC:
        raise GGUFError(f"{name} is not a GGUF file (it does not start with 'GGUF')")
    cursor.take(4, "the magic")
    version = cursor.scalar("<I", "the version")
    if version not in VERSIONS:
        raise GGUFError(f"{name} is GGUF version {version}: versions {VERSIONS} are read")
    n_tensors, n_keys = cursor.scalar("<Q", "the tensor count"), cursor.scalar("<Q", "the key count")
    metadata = {}
    for _ in range(n_keys):
        key = cursor.string("a metadata key")
        metadata[key] = cursor.value(cursor.scalar("<I", key), key)
    infos = [_tensor_info(cursor) for _ in range(n_tensors)]  # each takes bytes: a lying count meets the end
    alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"{name}'s general.alignment {alignment!r} is not a power of two")
    data_start = -(-cursor.at // alignment) * alignment
    tensors, floats = {}, 0
    for tensor_name, shape, kind, offset in infos:
        size = _checked_size(name, tensor_name, shape, kind)
        if data_start + offset + size > len(data):
            raise GGUFError(f"{name} is truncated or its header is wrong: tensor {tensor_name} {shape} claims "
                            f"{_bytes(size)} at byte {data_start + offset:,}, past the end of the file "
                            f"({_bytes(len(data))})")
        if tensor_name in tensors:
            raise GGUFError(f"{name} holds tensor {tensor_name} twice")
        tensors[tensor_name] = TensorInfo(shape, GGMLQuantizationType(kind), data_start + offset, size)
        floats += 4 * math.prod(shape)
    if floats > max_bytes:
        raise GGUFError(f"{name}'s weights take {_bytes(floats)} as float32, over the cap of {_bytes(max_bytes)}")
    return metadata, tensors


def _tensor_info(cursor: Cursor) -> tuple[str, tuple[int, ...], int, int]:
    name = cursor.string("a tensor's name")
    n_dims = cursor.scalar("<I", name)
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(f"{cursor.name}'s tensor {name} has {n_dims} dimensions (1 to {MAX_DIMS} are possible)")
    dims = [cursor.scalar("<Q", name) for _ in range(n_dims)]
    return name, tuple(reversed(dims)), cursor.scalar("<I", name), cursor.scalar("<Q", name)


def _checked_size(file: str, name: str, shape: tuple[int, ...], kind: int) -> int:
    """The bytes a tensor takes in the file, once its type is one read here and its rows whole blocks."""
    try:
        kind = GGMLQuantizationType(kind)
    except ValueError:
        raise GGUFError(f"{file}'s tensor {name} has an unknown type {kind}") from None
    if kind not in TYPES:
        raise GGUFError(f"{file}'s tensor {name} is of type {kind.name}, which is not read here "
                        f"(read: {', '.join(t.name for t in TYPES)})")
    block, block_bytes = GGML_QUANT_SIZES[kind]
    if shape[-1] % block:
        raise GGUFError(f"{file}'s tensor {name} {shape}: its rows are not whole {kind.name} blocks of {block}")
    return math.prod(shape) // block * block_bytes


def read_tensor(data: mmap.mmap, tensor: TensorInfo) -> np.ndarray:
    """A tensor's values as float32, dequantized with the gguf package."""
    raw = np.frombuffer(data[tensor.start:tensor.start + tensor.size], dtype=np.uint8)  # a copy: the map can close
    rows = raw.reshape(*tensor.shape[:-1], -1)  # each row a whole number of blocks (checked)
    values = dequantize(rows, tensor.kind).reshape(tensor.shape)
    return values if values.flags.writeable else values.copy()  # F32 comes back as a view of the read-only bytes


def _bytes(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n:,} bytes"


# ---------------------------------------------------------------- metadata -> config, names, tokenizer


def hf_config(metadata: dict, tensors: dict[str, TensorInfo], name: str) -> dict:
    """The Hugging Face Llama config.json that the metadata describes (core.pretrained.llama_config checks it)."""
    arch = metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise GGUFError(f"{name} is a {arch!r} model: only {' and '.join(ARCHITECTURES)} models are read yet")
    missing = [f"{arch}.{key}" for key in REQUIRED_KEYS if f"{arch}.{key}" not in metadata]
    if missing:
        raise GGUFError(f"{name}'s metadata lacks {', '.join(missing)}")
    hf = {"model_type": arch, "tie_word_embeddings": "output.weight" not in tensors}
    for key, theirs in CONFIG_KEYS.items():
        value = metadata.get(f"{arch}.{key}")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise GGUFError(f"{name}'s metadata {arch}.{key} is {value!r}, not a number")
        hf[theirs] = value
    hf.setdefault("num_key_value_heads", hf["num_attention_heads"])
    if "token_embd.weight" not in tensors:
        raise GGUFError(f"{name} has no token_embd.weight")
    hf["vocab_size"] = tensors["token_embd.weight"].shape[0]  # the embedding's rows, whatever the metadata says
    head_dim = hf["hidden_size"] // max(hf["num_attention_heads"], 1)
    if metadata.get(f"{arch}.rope.dimension_count", head_dim) != head_dim:
        raise GGUFError(f"{name} rotates {metadata[f'{arch}.rope.dimension_count']} of each head's {head_dim} "
                        "channels: this GPT rotates them all")
    scaling = metadata.get(f"{arch}.rope.scaling.type", "none")
    if scaling != "none" or "rope_freqs.weight" in tensors:
        raise GGUFError(f"{name} asks for RoPE scaling ({scaling}): this GPT supports only plain RoPE")
    return hf


def hf_name(name: str, file: str) -> str:
    """A GGUF tensor's Hugging Face Llama name (blk.3.attn_q.weight -> model.layers.3.self_attn.q_proj.weight).
    A bias of q, k or v passes here; core.pretrained's Llama path takes it for a Qwen2 and refuses it for a Llama."""
    module, _, kind = name.rpartition(".")
    parts = module.split(".")
    if parts[0] == "blk" and len(parts) == 3 and parts[1].isdigit():
        template, block = f"blk.{{i}}.{parts[2]}", parts[1]
    else:
        template, block = module, None
    if template not in TENSOR_NAMES or kind != "weight" and not (kind == "bias" and parts[-1] in BIASED):
        raise GGUFError(f"{file} holds a tensor a Llama has not: {name}")
    return f"{TENSOR_NAMES[template].format(i=block)}.{kind}"


def gguf_tokenizer(metadata: dict, name: str) -> HFTokenizer:
    """The byte-level BPE tokenizer the metadata describes (tokenizer.ggml.model "gpt2"), with its special
    tokens whole and its text split as tokenizer.ggml.pre says."""
    model = metadata.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise GGUFError(f"{name}'s tokenizer is {model!r}: only byte-level BPE ('gpt2') tokenizers are read yet")
    split = metadata.get("tokenizer.ggml.pre", "default")
    if split not in SPLITS:
        raise GGUFError(f"{name}'s tokenizer splits text as {split!r}, which is not read yet "
                        f"(read: {', '.join(SPLITS)})")
    tokens, merges = metadata.get("tokenizer.ggml.tokens"), metadata.get("tokenizer.ggml.merges")
    if not _strings(tokens) or not _strings(merges) or any(merge.count(" ") != 1 for merge in merges):
        raise GGUFError(f"{name}'s tokenizer needs tokenizer.ggml.tokens and .merges, lists of strings "
                        "(merges as 'left right')")
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise GGUFError(f"{name}'s tokenizer repeats tokens")
    try:
        tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, [tuple(m.split(" ")) for m in merges]))
    except Exception as error:  # tokenizers raises a bare Exception for merges of unknown tokens
        raise GGUFError(f"{name}'s tokenizer cannot be built: {error}") from None
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(SPLITS[split])
    tokenizer.decoder = decoders.ByteLevel()
    kinds = metadata.get("tokenizer.ggml.token_type") or []
    tokenizer.add_special_tokens([tokenizers.AddedToken(token, special=True, normalized=False)
                                  for token, kind in zip(tokens, kinds) if kind == CONTROL])
    return HFTokenizer(tokenizer)


def _strings(values) -> bool:
    return isinstance(values, list) and bool(values) and all(isinstance(v, str) for v in values)


# ---------------------------------------------------------------- which models a folder offers

OLLAMA_MODEL = "application/vnd.ollama.image.model"  # the mediaType of the layer that is the GGUF file
OLLAMA_REGISTRY = "registry.ollama.ai"
DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
MAX_MANIFEST_BYTES = 1_000_000  # a manifest lists a few layers: a larger file is not one


def gguf_models(folder: str | Path) -> dict[str, Path]:
    """The GGUF models in a folder by name, sorted: each *.gguf file by its stem, and each model of an Ollama
    models folder by name:tag (namespace/name:tag outside Ollama's library, host/... outside its registry).
    A path to one .gguf file offers that file."""
    folder = Path(folder).expanduser()
    if folder.is_file():
        return {folder.stem: folder}
    models = {path.stem: path for path in folder.glob("*.gguf") if path.is_file()}
    manifests = folder / "manifests"
    for manifest in manifests.glob("*/*/*/*") if manifests.is_dir() else ():
        blob = _ollama_blob(manifest, folder / "blobs")
        if blob is not None:
            host, namespace, name, tag = manifest.relative_to(manifests).parts
            prefix = "" if (host, namespace) == (OLLAMA_REGISTRY, "library") else \
                f"{namespace}/" if host == OLLAMA_REGISTRY else f"{host}/{namespace}/"
            models[f"{prefix}{name}:{tag}"] = blob
    return dict(sorted(models.items()))


def _ollama_blob(manifest: Path, blobs: Path) -> Path | None:
    """The GGUF blob an Ollama manifest names (None when it is no model's manifest, or its blob is missing)."""
    try:
        if not manifest.is_file() or manifest.stat().st_size > MAX_MANIFEST_BYTES:
            return None
        layers = json.loads(manifest.read_text()).get("layers")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    for layer in layers if isinstance(layers, list) else ():
        if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL:
            digest = DIGEST.fullmatch(str(layer.get("digest")))
            blob = blobs / f"sha256-{digest[1]}" if digest else None
            return blob if blob is not None and blob.is_file() else None
    return None
