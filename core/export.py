"""Out to the ecosystem: a model as a Hugging Face `transformers` folder, and that folder on the Hub.

    folder = to_transformers(model, tokenizer, meta, "out/shakespeare-hf")
    push_to_hub(folder, "me/tiny-shakespeare")

    # then, anywhere:
    AutoModelForCausalLM.from_pretrained("out/shakespeare-hf")   # the same logits as `model`

The folder holds config.json, model.safetensors, tokenizer.json with tokenizer_config.json (so
`AutoTokenizer` encodes exactly as our tokenizer does), and a model card, README.md, with the loss
curve beside it (`core.modelcard`).

The model becomes the architecture of `transformers` whose options it has (`TARGETS`): GPT-2's parts
make a GPT2LMHeadModel, Llama's (rotary positions, RMSNorm, SwiGLU, grouped key/value heads) a
LlamaForCausalLM, or a MistralForCausalLM when it has a sliding window. A model with an option its
nearest architecture cannot express is refused, every such option named in one message
(`NotExpressible`): nothing is written that would compute something else.

Weights are renamed with `core.pretrained`'s mappings, read the other way. Two things GPT-2's layers
always have are made from nothing, without changing what it computes: a bias our model does without is
written as zeros, and a model without positions gets a position table of zeros.

Never imports `transformers` (the tests load the folder with it; the app does not need it), gradio,
plotly or `playground`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import HfApi
from safetensors.torch import save_file

from core import modelcard
from core.config import GPTConfig
from core.model import GPT
from core.pretrained import (
    CONFIG_FILE, CONV1D, HF_ACTIVATIONS, LLAMA_MODULES, LLAMA_SIZES, LLAMA_STACKED, MODULES, PREFIX, SIZES,
    TOKENIZER_FILE, WEIGHTS_FILE,
)
from core.tokenizers import END_OF_TEXT, Tokenizer

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
# Every file an export writes (the card's image only where there is a curve): what is uploaded.
FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, modelcard.CARD_FILE, modelcard.CURVE_FILE)
# Our activation -> GPT-2's activation_function, core.pretrained's table read backwards. For "gelu_tanh"
# the last name there wins: "gelu_pytorch_tanh", torch's own tanh GELU, the very function ours runs.
GPT2_ACTIVATIONS = {ours: theirs for theirs, ours in HF_ACTIVATIONS.items()}


@dataclass(frozen=True)
class Target:
    """An architecture of `transformers` and the GPTConfig options it can express: field -> the values it
    can take (a field not named takes any value)."""

    architecture: str  # the model class, config.json's "architectures"
    model_type: str  # config.json's "model_type"
    needs: dict[str, tuple]


# What every architecture here is: a stack of blocks, each attention then a feed-forward on a residual
# stream, reading only the past (the Train tab's break-it switches take these away).
DECODER = dict(use_attention=(True,), use_feed_forward=(True,), use_residual=(True,), causal=(True,))
LLAMA_NEEDS = dict(position=("rope",), norm=("rmsnorm",), activation=("swiglu",), bias=(False,), qkv_bias=(False,),
                   lm_head_bias=(False,), scale_attention=(True,), **DECODER)
# In order of preference: a model is exported as the first of those with the fewest options it lacks.
TARGETS = (
    # GPT-2's biases are always there (ours, if missing, are zeros: `bias` and `qkv_bias` take any value);
    # its attention can go unscaled (scale_attn_weights); its position table may be zeros.
    Target("GPT2LMHeadModel", "gpt2", dict(position=("learned", "none"), norm=("layernorm",),
                                           activation=tuple(GPT2_ACTIVATIONS), n_kv_head=(None,), window=(None,),
                                           lm_head_bias=(False,), **DECODER)),
    Target("LlamaForCausalLM", "llama", dict(LLAMA_NEEDS, window=(None,))),
    Target("MistralForCausalLM", "mistral", LLAMA_NEEDS),  # Llama with a sliding window
)


class NotExpressible(ValueError):
    """The model has options that no architecture of `transformers` here can express; the message names them."""


def target(config: GPTConfig) -> Target:
    """The architecture that expresses `config` exactly; NotExpressible naming every option the nearest
    one lacks when none does."""
    if config.n_kv_head == config.n_head:
        config = dataclasses.replace(config, n_kv_head=None)  # as many key/value heads as queries: plain attention
    lacking = [[(field, getattr(config, field), allowed) for field, allowed in t.needs.items()
                if getattr(config, field) not in allowed] for t in TARGETS]
    nearest = min(range(len(TARGETS)), key=lambda i: len(lacking[i]))  # the first of equals
    if lacking[nearest]:
        options = "; ".join(f"{field}={value!r} (it needs {' or '.join(map(repr, allowed))})"
                            for field, value, allowed in lacking[nearest])
        raise NotExpressible(f"transformers' {TARGETS[nearest].architecture} cannot express this model's {options}")
    return TARGETS[nearest]


def refusal(config: GPTConfig) -> str | None:
    """Why `config` cannot be exported (NotExpressible's message, every option named); None when it can."""
    try:
        target(config)
    except NotExpressible as error:
        return str(error)
    return None


def to_transformers(model: GPT, tokenizer: Tokenizer, meta: dict, out: str | Path, *,
                    load_from: str | None = None) -> Path:
    """Write `model` as a `transformers` model folder at `out` (created if needed; files of an earlier
    export replaced); returns the folder. `meta` is a checkpoint's (corpus, steps, history, train_config)
    for the model card, whose loading code reads the model from `load_from` (a Hub repo id, or the folder
    as the user will find it), by default `out` as given.

    Raises NotExpressible, before writing anything, when the model has options the target cannot express.
    """
    config = model.config
    chosen = target(config)
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model {config.vocab_size}")
    state = {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in model.state_dict().items()}
    if config.tie_weights:
        del state["lm_head.weight"]  # the token embedding itself: transformers ties it again
    if chosen.model_type == "gpt2":
        hf_config, tensors = _gpt2_config(config), _gpt2_tensors(config, state)
    else:
        hf_config, tensors = _llama_config(config, chosen), _llama_tensors(config, state)
    assert not state, f"tensors the mapping left out: {sorted(state)}"  # they would load as random weights
    end = _end_of_text(tokenizer)
    hf_config.update(architectures=[chosen.architecture], model_type=chosen.model_type, vocab_size=config.vocab_size,
                     tie_word_embeddings=config.tie_weights, bos_token_id=end, eos_token_id=end, dtype="float32")

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(hf_config, indent=2) + "\n")
    save_file(tensors, folder / WEIGHTS_FILE, metadata={"format": "pt"})  # transformers reads "pt" files only
    # safetensors creates its file readable by its owner alone: give it the mode every other file gets
    os.chmod(folder / WEIGHTS_FILE, (folder / CONFIG_FILE).stat().st_mode & 0o777)
    tokenizer.huggingface().save(str(folder / TOKENIZER_FILE))
    (folder / TOKENIZER_CONFIG_FILE).write_text(json.dumps(_tokenizer_config(config, end), indent=2) + "\n")
    modelcard.write(folder, config=config, architecture=chosen.architecture, model_type=chosen.model_type,
                    tokenizer=tokenizer, meta=meta, parameters=model.parameter_counts()["total"],
                    where=load_from or str(out))
    return folder


def push_to_hub(folder: str | Path, repo_id: str, *, token: str | None = None) -> str:
    """Upload an exported folder to the Hub model repo `repo_id` (created if missing); the commit's URL.
    The token is huggingface_hub's: `token`, else $HF_TOKEN or the one `hf auth login` saved."""
    folder = Path(folder)
    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="model", exist_ok=True)
    commit = api.upload_folder(
        repo_id=repo_id, repo_type="model", folder_path=folder,
        allow_patterns=[name for name in FILES if (folder / name).is_file()],  # nothing else that is in the folder
        commit_message="Upload a model exported from Attention Playground",
    )
    return commit.commit_url


# ---------------------------------------------------------------- GPT-2


def _gpt2_config(config: GPTConfig) -> dict:
    d = config.dropout
    return {
        **{theirs: getattr(config, ours) for theirs, ours in SIZES.items() if theirs != "vocab_size"},
        "n_inner": config.ffn_hidden, "activation_function": GPT2_ACTIVATIONS[config.activation],
        "layer_norm_epsilon": config.norm_eps, "scale_attn_weights": config.scale_attention,
        "resid_pdrop": d, "embd_pdrop": d, "attn_pdrop": d,
    }


def _gpt2_tensors(config: GPTConfig, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's tensors, taken out of `state` (ours): renamed, Conv1D weights transposed, every
    bias GPT-2 has and we lack written as zeros."""
    tensors = {}
    for theirs, ours in _each_layer(MODULES, config.n_layer):
        weight = state.pop(f"{ours}.weight", None)
        if weight is None:  # only the position table, in a model without positions: GPT-2 adds zeros
            weight = torch.zeros(config.block_size, config.n_embd)
        tensors[f"{PREFIX}{theirs}.weight"] = weight.t().contiguous() if theirs.split(".")[-1] in CONV1D else weight
        if theirs not in ("wte", "wpe"):  # embeddings have no bias
            bias = state.pop(f"{ours}.bias", None)
            tensors[f"{PREFIX}{theirs}.bias"] = torch.zeros(weight.shape[0]) if bias is None else bias  # (out,)
    if not config.tie_weights:
        tensors["lm_head.weight"] = state.pop("lm_head.weight")
    return tensors


# ---------------------------------------------------------------- Llama and Mistral


def _llama_config(config: GPTConfig, chosen: Target) -> dict:
    sizes = dataclasses.replace(config, mlp_hidden=config.ffn_hidden)  # the hidden size, however it was given
    hf = {
        **{theirs: getattr(sizes, ours) for theirs, ours in LLAMA_SIZES.items() if theirs != "vocab_size"},
        "num_key_value_heads": config.kv_heads, "head_dim": config.head_size, "hidden_act": "silu",
        "rms_norm_eps": config.norm_eps, "attention_bias": False, "mlp_bias": False,
        "attention_dropout": config.dropout,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_base},  # transformers 5
        "rope_theta": config.rope_base,  # transformers 4
    }
    if chosen.model_type == "mistral":
        hf["sliding_window"] = config.window
    return hf


def _llama_tensors(config: GPTConfig, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """LlamaForCausalLM's tensors, taken out of `state`: renamed, our stacked q/k/v and gate/up split."""
    tensors = {f"{theirs}.weight": state.pop(f"{ours}.weight")
               for theirs, ours in _each_layer(LLAMA_MODULES, config.n_layer)
               if not (ours == "lm_head" and config.tie_weights)}
    kv_channels = config.kv_heads * config.head_size
    sizes = {"blocks.{i}.attn.qkv": [config.n_embd, kv_channels, kv_channels],
             "blocks.{i}.mlp.fc": [config.ffn_hidden, config.ffn_hidden]}
    for ours, parts in LLAMA_STACKED.items():
        for layer in range(config.n_layer):
            pieces = state.pop(ours.format(i=layer) + ".weight").split(sizes[ours])
            for part, piece in zip(parts, pieces):
                tensors[part.format(i=layer) + ".weight"] = piece.clone()  # its own memory: safetensors shares none
    return tensors


def _each_layer(modules: list[tuple[str, str]], n_layer: int) -> Iterator[tuple[str, str]]:
    """(theirs, ours) module names with each block's number in place of {i}."""
    for theirs, ours in modules:
        for layer in range(n_layer) if "{i}" in ours else [None]:
            yield theirs.format(i=layer), ours.format(i=layer)


# ---------------------------------------------------------------- the tokenizer


def _end_of_text(tokenizer: Tokenizer) -> int | None:
    """GPT-2's <|endoftext|>, where the vocabulary has it: transformers' generate stops there. A
    character vocabulary has no such token (and transformers' default ids would be characters)."""
    return getattr(tokenizer, "end_of_text", None)


def _tokenizer_config(config: GPTConfig, end: int | None) -> dict:
    """What AutoTokenizer needs beside tokenizer.json: the class that reads it as it is, the context."""
    special = {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT} if end is not None else {}
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config.block_size,
            "model_input_names": ["input_ids", "attention_mask"],  # no token_type_ids: Llama's forward refuses them
            **special}
