"""OpenAI's pretrained GPT-2 in this project's GPT, read from Hugging Face's safetensors files.

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

Weights are read only from safetensors files: a pickled checkpoint (pytorch_model.bin) can run
code when it is loaded, so it is refused. The tokenizer is GPT-2's, vendored in `core.tokenizers`.

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
from core.tokenizers import GPT2Tokenizer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
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
    tokenizer: GPT2Tokenizer
    name: str  # what was asked for: a Hub repo id or a folder
    folder: Path  # where the files were read (for a Hub model, its snapshot in the cache)

    def view(self) -> GPT:
        """A GPT module of its own over these very weights (no copy). Hooks and flags live on modules
        (core.interventions' hooks, GPT.explicit_attention), so users who share one model each read it
        through a view: what one of them hooks never touches another's forward pass."""
        return _build(self.model.config, self.model.state_dict())  # detached tensors, the same storage


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
    return Pretrained(_build(config, state), tokenizer, name_or_path, folder)


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


def _build(config: GPTConfig, state: dict[str, torch.Tensor]) -> GPT:
    """The GPT of `config` holding `state`, in eval mode and without gradients."""
    with torch.device("meta"):
        model = GPT(config)  # shapes only: no memory, no random draws; every weight comes from `state`
    expected = {name: p.shape for name, p in model.named_parameters()}  # the tied head only once
    missing = [name for name in expected if name not in state]
    if missing:
        raise ValueError(f"the GPT-2 weights lack {_listed(missing)}")
    wrong = [f"{name} {tuple(state[name].shape)} (expected {tuple(shape)})"
             for name, shape in expected.items() if state[name].shape != shape]
    if wrong:
        raise ValueError(f"GPT-2 tensors of the wrong shape for config.json: {_listed(wrong)}")
    model.load_state_dict({**state, "lm_head.weight": state["token_embedding.weight"]}, assign=True)
    model.lm_head.weight = model.token_embedding.weight  # assigning gave each its own Parameter: tie again
    return model.eval().requires_grad_(False)


def _download(repo_id: str, cache_dir: str | Path | None) -> Path:
    """Fetch config.json and model.safetensors of a Hub repo (or find them in the cache) -> their folder."""
    # huggingface_hub reads HF_HUB_OFFLINE once, when imported; read it now too. Without a network it
    # retries five times with back-off (24 s before it gives up): a Hub whose name does not even resolve
    # is offline at once, and the files come from the cache if they are there.
    offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"} or not _hub_resolves()
    try:
        paths = [hf_hub_download(repo_id, name, cache_dir=cache_dir, local_files_only=offline)
                 for name in (CONFIG_FILE, WEIGHTS_FILE)]
    except HFValidationError:
        raise ValueError(f"{repo_id!r} is neither a folder here nor a Hugging Face Hub repo id") from None
    # Offline mode, no connection, no such repo or file: huggingface_hub raises OSErrors for them all.
    except (OSError, XetDownloadError) as error:
        raise PretrainedUnavailable(
            f"The GPT-2 weights {repo_id!r} could not be downloaded from the Hugging Face Hub "
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
