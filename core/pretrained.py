"""Pretrained models in this project's GPT: OpenAI's GPT-2 and Llama-architecture models, read from
Hugging Face's safetensors files.

    gpt2 = load_gpt2("gpt2")                # the Hub's 124M model (downloaded once, then cached)
    gpt2 = load_gpt2("/models/gpt2")        # a folder with config.json and model.safetensors
    logits, _ = gpt2.model(torch.tensor([gpt2.tokenizer.encode("Hello")]))

GPT-2 is the model `core.model` is written after, so the mapping is a renaming:

    Hugging Face GPT2LMHeadModel        core.model.GPT
    wte, wpe                            token_embedding, position_embedding
    h.{i}.ln_1, h.{i}.ln_2              blocks.{i}.ln1, blocks.{i}.ln2
    h.{i}.attn.c_attn, .c_proj          blocks.{i}.attn.qkv, blocks.{i}.attn.proj
    h.{i}.mlp.c_fc, .c_proj             blocks.{i}.mlp.fc, blocks.{i}.mlp.proj
    ln_f                                ln_f
    lm_head                             lm_head, tied to the token embedding

with three details: the names may carry a "transformer." prefix (what `save_pretrained` writes;
the Hub's original `gpt2` files have none); GPT-2's Conv1D layers store their weights (in, out),
nn.Linear (out, in), so those are transposed; and the feed-forward's GELU is the tanh
approximation GPT-2 was trained with (config.json's "gelu_new", our "gelu_tanh").

Llama-architecture models (Llama, SmolLM2, Mistral; Qwen2, the same with biases on its query, key and value
projections) map onto the same GPT with today's options (`load_llama`): rotary positions, RMSNorm, SwiGLU,
grouped queries, no other biases. Their query, key and value projections (weights, and Qwen2's biases) are
stacked into one `qkv`, the gate and up projections into one `fc`:

    Hugging Face LlamaForCausalLM                           core.model.GPT
    model.embed_tokens                                      token_embedding
    model.layers.{i}.input_layernorm, .post_attention_layernorm   blocks.{i}.ln1, blocks.{i}.ln2
    model.layers.{i}.self_attn.q_proj, k_proj, v_proj       blocks.{i}.attn.qkv (stacked, in that order)
    model.layers.{i}.self_attn.o_proj                       blocks.{i}.attn.proj
    model.layers.{i}.mlp.gate_proj, up_proj                 blocks.{i}.mlp.fc (stacked, gate first)
    model.layers.{i}.mlp.down_proj                          blocks.{i}.mlp.proj
    model.norm, lm_head                                     ln_f, lm_head (or tied to the embedding)

    smol = load_llama("HuggingFaceTB/SmolLM2-135M")        # or a folder with config.json,
                                                            # model.safetensors and tokenizer.json

Weights are read only from safetensors files: a pickled checkpoint (pytorch_model.bin) can run
code when it is loaded, so it is refused. GPT-2's tokenizer is vendored in `core.tokenizers`; a
Llama model's is its own tokenizer.json, read with Hugging Face `tokenizers`.

Never imports `transformers` (tests compare against it; the app does not need it), gradio, plotly or `playground`.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from huggingface_hub import constants, hf_hub_download
from huggingface_hub.errors import HFValidationError, XetDownloadError
from safetensors import SafetensorError
from safetensors.torch import load_file

from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import GPT2Tokenizer, HFTokenizer, Tokenizer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"  # a Llama model's own tokenizer (Hugging Face `tokenizers`)
INDEX_FILE = "model.safetensors.index.json"  # a sharded model: which shard holds each tensor
PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
DOWNLOAD_ADVICE = (
    f"Point at a local folder that holds {CONFIG_FILE} and {WEIGHTS_FILE} instead, e.g. one made with "
    f"`huggingface-cli download gpt2 {CONFIG_FILE} {WEIGHTS_FILE} --local-dir DIR`."
)

# Hugging Face GPT-2 module -> this project's module, each with a weight and (but the embeddings) a
# bias; {i} is a block's number.
MODULES = [
    ("wte", "token_embedding"),
    ("wpe", "position_embedding"),
    ("h.{i}.ln_1", "blocks.{i}.ln1"),
    ("h.{i}.attn.c_attn", "blocks.{i}.attn.qkv"),
    ("h.{i}.attn.c_proj", "blocks.{i}.attn.proj"),
    ("h.{i}.ln_2", "blocks.{i}.ln2"),
    ("h.{i}.mlp.c_fc", "blocks.{i}.mlp.fc"),
    ("h.{i}.mlp.c_proj", "blocks.{i}.mlp.proj"),
    ("ln_f", "ln_f"),
]
CONV1D = {"c_attn", "c_proj", "c_fc"}  # their weights are stored (in, out): transposed on the way in
PREFIX = "transformer."  # what GPT2LMHeadModel puts before the names above
# Tensors a GPT-2 file may hold that the model does without: old versions' causal-mask buffers
# (the mask is built on the fly) and the LM head, which is the token embedding (tied).
IGNORED = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)|lm_head\.weight")
RULES = [
    (re.compile(re.escape(theirs).replace(r"\{i\}", r"(?P<i>\d+)") + r"\.(?P<kind>weight|bias)"), ours)
    for theirs, ours in MODULES
]

# config.json's sizes -> GPTConfig's fields.
SIZES = {"vocab_size": "vocab_size", "n_positions": "block_size", "n_layer": "n_layer", "n_head": "n_head",
         "n_embd": "n_embd"}
# config.json's activation_function -> core.config.ACTIVATIONS ("gelu_new" is GPT-2's own).
HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
# GPT-2 settings that variants may change and this model cannot follow, with the value it needs
# (GPT2Config's default, which a missing key means). The epsilon is nn.LayerNorm's default.
REQUIRED = {
    "layer_norm_epsilon": 1e-5,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}


class PretrainedUnavailable(RuntimeError):
    """The weights could not be downloaded from the Hugging Face Hub (offline, unreachable, missing)."""


@dataclass(frozen=True)
class Pretrained:
    model: GPT  # eval mode, no gradients: read-only, safe to share between users
    tokenizer: Tokenizer
    name: str  # what was asked for: a Hub repo id or a folder
    folder: Path  # where the files were read (for a Hub model, its snapshot in the cache)

    def view(self) -> GPT:
        """A GPT module of its own over these very weights (no copy). Hooks and flags live on modules
        (core.interventions' hooks, GPT.explicit_attention), so users who share one model each read it
        through a view: what one of them hooks never touches another's forward pass."""
        return build(self.model.config, self.model.state_dict())  # detached tensors, the same storage


def load_gpt2(name_or_path: str = "gpt2", *, cache_dir: str | Path | None = None) -> Pretrained:
    """A pretrained GPT-2 from a local folder (when `name_or_path` is one) or a Hub repo id.

    Raises PretrainedUnavailable when the Hub cannot give the files (HF_HUB_OFFLINE set, no
    network, no such repo), ValueError when the files are not a GPT-2 this project can run.
    """
    folder = Path(name_or_path).expanduser()
    if not folder.is_dir():
        folder = _download(name_or_path, cache_dir)
    tokenizer = GPT2Tokenizer()
    config = gpt_config(_read_json(folder / CONFIG_FILE), tokenizer.vocab_size)
    state = convert_state(_read_weights(folder))
    return Pretrained(build(config, state), tokenizer, name_or_path, folder)


def gpt_config(hf: dict, vocab_size: int) -> GPTConfig:
    """The GPTConfig of a Hugging Face GPT-2 config.json; `vocab_size` is the tokenizer's."""
    if hf.get("model_type") != "gpt2":
        raise ValueError(f"config.json's model_type is {hf.get('model_type')!r}: only 'gpt2' models can be loaded")
    for key, needed in REQUIRED.items():
        if hf.get(key, needed) != needed:
            raise ValueError(f"config.json sets {key}={hf[key]!r}: this GPT supports only {key}={needed!r}")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in HF_ACTIVATIONS:
        raise ValueError(f"config.json's activation_function {activation!r} is not one of {sorted(HF_ACTIVATIONS)}")
    sizes = {ours: hf.get(theirs) for theirs, ours in SIZES.items()}
    missing = [key for key in SIZES if key not in hf]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}")
    if sizes["vocab_size"] != vocab_size:
        raise ValueError(f"config.json's vocab_size is {sizes['vocab_size']!r}: GPT-2's tokenizer has {vocab_size}")
    config = GPTConfig(**sizes, dropout=0.0, bias=True, qkv_bias=True, lm_head_bias=False,
                       activation=HF_ACTIVATIONS[activation], tie_weights=True)
    if hf.get("n_inner") not in (None, 4 * config.n_embd):
        raise ValueError(f"config.json's n_inner is {hf['n_inner']!r}: this GPT's feed-forward is 4 * n_embd wide")
    return config


def convert_state(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face GPT-2 tensors -> this GPT's parameters (float32), renamed and transposed."""
    state, unexpected = {}, []
    for name, tensor in weights.items():
        name = name.removeprefix(PREFIX)
        ours = _our_name(name)
        if ours is None and IGNORED.fullmatch(name):
            continue
        if ours is None or ours in state:  # unknown, or there twice (with and without the prefix)
            unexpected.append(name)
            continue
        if name.split(".")[-2] in CONV1D and name.endswith(".weight"):
            tensor = tensor.t()  # (in, out) -> (out, in)
        # Always a copy: the file's tensors are views of its memory map, which stays mapped (and counted in
        # the process's memory, the whole file) as long as one of them lives.
        state[ours] = tensor.to(torch.float32, memory_format=torch.contiguous_format, copy=True)
    if unexpected:
        raise ValueError(f"unexpected (or repeated) tensors in the GPT-2 weights: {_listed(unexpected)}")
    return state


def _our_name(name: str) -> str | None:
    for pattern, ours in RULES:
        if match := pattern.fullmatch(name):
            return ours.format(i=match.groupdict().get("i")) + "." + match["kind"]
    return None


# ---------------------------------------------------------------- Llama-architecture models

LLAMA_TYPES = ("llama", "mistral", "qwen2")  # config.json model_types of the same architecture (Qwen2: q/k/v biases)
# Hugging Face Llama module -> this project's module (weights only: Llama has no biases); {i} a block.
LLAMA_MODULES = [
    ("model.embed_tokens", "token_embedding"),
    ("model.layers.{i}.input_layernorm", "blocks.{i}.ln1"),
    ("model.layers.{i}.self_attn.o_proj", "blocks.{i}.attn.proj"),
    ("model.layers.{i}.post_attention_layernorm", "blocks.{i}.ln2"),
    ("model.layers.{i}.mlp.down_proj", "blocks.{i}.mlp.proj"),
    ("model.norm", "ln_f"),
    ("lm_head", "lm_head"),
]
# Projections stacked into one of ours, in this order: query, key, value; the gate, then up.
LLAMA_STACKED = {
    "blocks.{i}.attn.qkv": ("model.layers.{i}.self_attn.q_proj", "model.layers.{i}.self_attn.k_proj",
                            "model.layers.{i}.self_attn.v_proj"),
    "blocks.{i}.mlp.fc": ("model.layers.{i}.mlp.gate_proj", "model.layers.{i}.mlp.up_proj"),
}
LLAMA_RULES = [(re.compile(re.escape(theirs).replace(r"\{i\}", r"(?P<i>\d+)") + r"\.weight"), ours)
               for theirs, ours in LLAMA_MODULES]
LLAMA_STACKED_PARTS = [re.compile(re.escape(part).replace(r"\{i\}", r"\d+") + r"\.(weight|bias)")
                       for parts in LLAMA_STACKED.values() for part in parts]
LLAMA_IGNORED = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")  # old files' RoPE buffer
# config.json's sizes -> GPTConfig's fields (all required).
LLAMA_SIZES = {"vocab_size": "vocab_size", "max_position_embeddings": "block_size", "num_hidden_layers": "n_layer",
               "num_attention_heads": "n_head", "hidden_size": "n_embd", "intermediate_size": "mlp_hidden"}


def load_llama(name_or_path: str, *, cache_dir: str | Path | None = None) -> Pretrained:
    """A pretrained Llama-architecture model (e.g. SmolLM2) from a local folder or a Hub repo id, with
    its tokenizer from the folder's tokenizer.json. Raises as `load_gpt2` does."""
    folder = Path(name_or_path).expanduser()
    if not folder.is_dir():
        folder = _download(name_or_path, cache_dir, (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE))
    config = llama_config(_read_json(folder / CONFIG_FILE))
    if not (folder / TOKENIZER_FILE).is_file():
        raise ValueError(f"{folder} has no {TOKENIZER_FILE}: a Llama model's tokenizer comes with it")
    tokenizer = HFTokenizer.from_file(folder / TOKENIZER_FILE)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"{TOKENIZER_FILE} has {tokenizer.vocab_size:,} tokens, more than the model's "
                         f"vocabulary of {config.vocab_size:,}")
    state = convert_llama_state(_read_weights(folder), config)
    return Pretrained(build(config, state), tokenizer, name_or_path, folder)


def llama_config(hf: dict) -> GPTConfig:
    """The GPTConfig of a Hugging Face Llama config.json (as transformers 4 or 5 writes it)."""
    if hf.get("model_type") not in LLAMA_TYPES:
        raise ValueError(f"config.json's model_type is {hf.get('model_type')!r}: a Llama model is one of {LLAMA_TYPES}")
    missing = [key for key in LLAMA_SIZES if key not in hf]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}")
    for key, needed in (("hidden_act", "silu"), ("attention_bias", False), ("mlp_bias", False)):
        if hf.get(key, needed) != needed:
            raise ValueError(f"config.json sets {key}={hf[key]!r}: this GPT supports only {key}={needed!r}")
    sizes = {ours: hf[theirs] for theirs, ours in LLAMA_SIZES.items()}
    head_dim = hf.get("head_dim")
    if head_dim is not None and head_dim * sizes["n_head"] != sizes["n_embd"]:
        raise ValueError(f"config.json's head_dim {head_dim!r} is not hidden_size / num_attention_heads: "
                         "this GPT's heads split the channels evenly")
    kv_heads = hf.get("num_key_value_heads") or sizes["n_head"]
    window = hf.get("sliding_window") if hf.get("use_sliding_window", True) else None
    qwen2 = hf["model_type"] == "qwen2"  # its query, key and value projections have biases, its others none
    if qwen2 and window is not None:
        raise ValueError("config.json sets use_sliding_window: Qwen2 slides only some layers' windows, which this "
                         "GPT does not follow")
    return GPTConfig(**sizes, dropout=0.0, bias=False, qkv_bias=qwen2, lm_head_bias=False, activation="swiglu",
                     tie_weights=bool(hf.get("tie_word_embeddings", False)), position="rope",
                     rope_base=rope_theta(hf), norm="rmsnorm", norm_eps=hf.get("rms_norm_eps", 1e-6),
                     n_kv_head=None if kv_heads == sizes["n_head"] else kv_heads, window=window)


def rope_theta(hf: dict) -> float:
    """RoPE's base from a config.json: transformers 5 writes `rope_parameters` ({"rope_theta", "rope_type"}),
    transformers 4 `rope_theta` and `rope_scaling` at the top level. Only unscaled RoPE is supported."""
    parameters = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    if not isinstance(parameters, dict) or not isinstance(scaling, dict):
        raise ValueError("config.json's rope_parameters and rope_scaling must be objects")
    kind = parameters.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind != "default":
        raise ValueError(f"config.json asks for {kind!r} RoPE scaling: this GPT supports only plain RoPE")
    return float(parameters.get("rope_theta", hf.get("rope_theta", 10000.0)))


def convert_llama_state(weights: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Hugging Face Llama tensors -> this GPT's parameters (float32): renamed, q/k/v and gate/up stacked."""
    state, unexpected = {}, []
    for name, tensor in weights.items():
        ours = next((rule.format(i=m.groupdict().get("i")) + ".weight"
                     for pattern, rule in LLAMA_RULES if (m := pattern.fullmatch(name))), None)
        if ours is not None:
            state[ours] = tensor.to(torch.float32, memory_format=torch.contiguous_format, copy=True)
        elif not LLAMA_IGNORED.fullmatch(name) and not _stacked_part(name):
            unexpected.append(name)
    if unexpected:
        raise ValueError(f"unexpected tensors in the Llama weights: {_listed(unexpected)}")
    stacked = set()
    for layer in range(config.n_layer):
        for ours, parts in LLAMA_STACKED.items():
            for kind in ("weight", "bias"):
                names = [f"{part.format(i=layer)}.{kind}" for part in parts]
                if all(name in weights for name in names):  # a missing weight: build names what is missing
                    state[f"{ours.format(i=layer)}.{kind}"] = torch.cat([weights[n].to(torch.float32) for n in names])
                    stacked.update(names)
    partial = [name for name in weights if name.endswith(".bias") and _stacked_part(name) and name not in stacked]
    if partial:  # a bias without the others of its stack would be left out unseen
        raise ValueError(f"unexpected tensors in the Llama weights: {_listed(partial)}")
    return state


def _stacked_part(name: str) -> bool:
    return any(pattern.fullmatch(name) for pattern in LLAMA_STACKED_PARTS)


def build(config: GPTConfig, state: dict[str, torch.Tensor]) -> GPT:
    """The GPT of `config` holding `state`, in eval mode and without gradients."""
    with torch.device("meta"):
        model = GPT(config)  # shapes only: no memory, no random draws; every weight comes from `state`
    expected = {name: p.shape for name, p in model.named_parameters()}  # a tied head only once
    missing = [name for name in expected if name not in state]
    if missing:
        raise ValueError(f"the weights lack {_listed(missing)}")
    extra = [name for name in state if name not in expected and not (config.tie_weights and name == "lm_head.weight")]
    if extra:
        raise ValueError(f"the weights hold tensors this model has not: {_listed(extra)}")
    wrong = [f"{name} {tuple(state[name].shape)} (expected {tuple(shape)})"
             for name, shape in expected.items() if state[name].shape != shape]
    if wrong:
        raise ValueError(f"tensors of the wrong shape for config.json: {_listed(wrong)}")
    if config.tie_weights:
        state = {**state, "lm_head.weight": state["token_embedding.weight"]}
    model.load_state_dict(state, assign=True)
    if config.tie_weights:
        model.lm_head.weight = model.token_embedding.weight  # assigning gave each its own Parameter: tie again
    return model.eval().requires_grad_(False)


def _download(repo_id: str, cache_dir: str | Path | None, files: tuple[str, ...] = (CONFIG_FILE, WEIGHTS_FILE)) -> Path:
    """Fetch `files` of a Hub repo (or find them in the cache) -> their folder."""
    # huggingface_hub reads HF_HUB_OFFLINE once, when imported; read it now too. Without a network it
    # retries five times with back-off (24 s before it gives up): a Hub whose name does not even resolve
    # is offline at once, and the files come from the cache if they are there.
    offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"} or not _hub_resolves()
    try:
        paths = [hf_hub_download(repo_id, name, cache_dir=cache_dir, local_files_only=offline) for name in files]
    except HFValidationError:
        raise ValueError(f"{repo_id!r} is neither a folder here nor a Hugging Face Hub repo id") from None
    # Offline mode, no connection, no such repo or file: huggingface_hub raises OSErrors for them all.
    except (OSError, XetDownloadError) as error:
        raise PretrainedUnavailable(
            f"The weights {repo_id!r} could not be downloaded from the Hugging Face Hub "
            f"({type(error).__name__}: {error}). {DOWNLOAD_ADVICE}"
        ) from error
    return Path(paths[0]).parent


def _hub_resolves() -> bool:
    """Whether the Hub's host name resolves: without DNS there is no network to wait for."""
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
    except (socket.gaierror, UnicodeError):
        return False
    return True


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path.parent} has no {path.name}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} cannot be read as JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's model.safetensors, or of the shards its index names."""
    if (folder / WEIGHTS_FILE).is_file():
        files = [folder / WEIGHTS_FILE]
    elif (folder / INDEX_FILE).is_file():
        weight_map = _read_json(folder / INDEX_FILE).get("weight_map")
        shards = list(weight_map.values()) if isinstance(weight_map, dict) else []
        if not shards or any(not isinstance(s, str) or Path(s).name != s for s in shards):
            raise ValueError(f"{folder / INDEX_FILE} needs a weight_map of tensor names to file names in {folder}")
        files = [folder / shard for shard in sorted(set(shards))]
    else:
        pickled = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLED_SUFFIXES)
        if pickled:
            raise ValueError(
                f"{folder} holds only pickled weights ({', '.join(pickled)}), which are refused: loading a "
                f"pickle can run arbitrary code. Convert them to {WEIGHTS_FILE} first (e.g. load the model "
                f"where you trust it with transformers and call save_pretrained, which writes safetensors)."
            )
        raise ValueError(f"{folder} has no {WEIGHTS_FILE} (nor {INDEX_FILE})")
    weights = {}
    for file in files:
        try:
            weights.update(load_file(file))
        except (OSError, SafetensorError) as error:
            raise ValueError(f"{file} cannot be read as safetensors: {error}") from None
    return weights


def _listed(names: list[str], shown: int = 10) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
