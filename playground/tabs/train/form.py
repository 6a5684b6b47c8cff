"""The Train tab's form, declared once, and the rules that read it.

- `TrainForm`: one field per input, in the API's order. The tab registers a component under each
  field's name, `takes_the_form` turns a method of the form into a Gradio handler whose parameters
  are those fields, and presets, checkpoints and the teacher's link fill the form by field name.
- `FormRules`: the checks that read a form into a `Recipe` (what to train, on what, and how), the
  presets' forms, the preset's description, and the server's caps on a model's size.

The tab's parts that read a form (the run, the checkpoints, the restore) are given one `FormRules`;
the teacher's link (`link`) reads forms with the same rules, so a link can set nothing the form would refuse.

Imports core, the app's settings and checks. Never imports another module of this tab: the run,
the replay, the checkpoints, the link and the layout all build on this one.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr
import torch

from core.config import STAGES, GPTConfig, stage_of
from core.data import CORPORA, Task, check_user_text, read_text_file
from core.model import GPT
from core.presets import PRESETS, get_preset, preset_configs
from playground import validate
from playground.settings import Settings

DEFAULT_PRESET = "repeat"  # offline, about ten seconds on one core, and a clear falling curve
PASTE, UPLOAD = "paste", "upload"
CORPUS_CHOICES = [(info.title, name) for name, info in CORPORA.items()] + [
    ("Paste your own text", PASTE), ("Upload a .txt file", UPLOAD),
]
TOKENIZER_CHOICES = [("Characters", "char"), ("GPT-2 BPE (50,257 tokens)", "gpt2")]
SAMPLE_TOKENS = 120  # the live sample's length (the run decides when to draw one)
# Break-it switches, each named after what it reads of a GPTConfig (`_switched_off`: what it sets when off):
# each removes something attention needs. (label, what to expect when off)
BREAK_IT = {
    "causal": ("Causal mask", "Off: every token also sees the future. The training loss collapses toward 0 while "
                              "generation is garbage: at generation time there is no future to copy."),
    "scale_attention": ("Scale by √d", "Off: scores are not divided by √(head size), so the softmax saturates: "
                                       "one key takes all the weight. Watch the maps go hard; Compare runs shows "
                                       "their entropy fall against a run with it on."),
    "use_position_embedding": ("Position embeddings", "Off: no token knows where it sits. One layer reads a bag of "
                                                      "tokens; deeper, only the causal mask leaks some order. On "
                                                      "the copy task it struggles to tell which letter comes next."),
}
# Today's parts (Llama and its family), GPTConfig fields: (label, what to look for in the maps). 0 in a
# number field means the option is off (one key/value head per query head; no window).
MODERN = {
    "position": ("Positions", "Learned: GPT-2's table of positions. RoPE: each head's query and key turn with "
                              "the position, so scores depend on distance. ALiBi: a fixed penalty that grows with "
                              "distance, one slope per head: maps fade away from the diagonal. None: only the mask "
                              "leaks order."),
    "norm": ("Normalisation", "RMSNorm (Llama) scales each token without subtracting its mean: cheaper, and "
                              "the maps barely change."),
    "activation": ("Feed-forward", "SwiGLU (Llama) gates the hidden layer; it is 8/3 wide instead of 4, so the "
                                   "parameter count stays about GELU's."),
    "n_kv_head": ("Key/value heads", "0: one per query head. Fewer: query heads share keys and values in groups "
                                     "(1: multi-query); the heads of a group often attend alike."),
    "window": ("Window", "0: every earlier token. N: a query sees only the last N keys, itself included: each "
                         "map becomes a band along its diagonal."),
}
POSITION_CHOICES = [("Learned (GPT-2)", "learned"), ("RoPE (Llama)", "rope"), ("ALiBi", "alibi"), ("None", "none")]
NORM_CHOICES = [("LayerNorm (GPT-2)", "layernorm"), ("RMSNorm (Llama)", "rmsnorm")]
ACTIVATION_CHOICES = [("GELU (GPT-2)", "gelu"), ("GELU, tanh (GPT-2's own)", "gelu_tanh"), ("ReLU (the lecture)", "relu"),
                      ("SwiGLU (Llama)", "swiglu")]
NORM_NAMES = {value: label.split(" (")[0] for label, value in NORM_CHOICES}  # "LayerNorm", "RMSNorm"
# The model fields the tab controls; a trained model continues only if these still match.
MODEL_FIELDS = ("n_layer", "n_head", "n_embd", "block_size", "dropout", *BREAK_IT, *MODERN)


@dataclass(frozen=True)
class TrainForm:
    """The Train tab's form as it arrives: one field per input, in the API's order, raw (any JSON a
    request carries; `FormRules.recipe` checks it).

    Declared once: the tab registers a component under each field's name, the handlers that take
    the form get these fields as their parameters (`takes_the_form`, which also names the API's
    keywords), and presets and checkpoints fill the form by field name.
    """

    preset: Any = DEFAULT_PRESET
    corpus: Any = DEFAULT_PRESET
    tokenizer: Any = "char"
    stage: Any = "gpt"
    n_layer: Any = None
    n_head: Any = None
    n_embd: Any = None
    block_size: Any = None
    dropout: Any = 0.0
    causal: Any = True
    scale_attention: Any = True
    use_position_embedding: Any = True
    steps: Any = None
    batch_size: Any = None
    learning_rate: Any = None
    seed: Any = 1337
    warmup: Any = 0
    eval_interval: Any = 100
    weight_decay: Any = 0.1
    grad_clip: Any = 1.0
    text: Any = ""
    upload: Any = None
    position: Any = "learned"
    norm: Any = "layernorm"
    activation: Any = "gelu"
    n_kv_head: Any = 0
    window: Any = 0


FORM_FIELDS = tuple(field.name for field in dataclasses.fields(TrainForm))


def takes_the_form(method: Callable) -> Callable:
    """`method(self, form: TrainForm, request)` as a Gradio handler whose parameters are the form's
    fields, one per input component (Gradio passes inputs positionally and names the API's keywords
    after the parameters), then `request`."""
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += [inspect.Parameter(field.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=field.default)
                   for field in dataclasses.fields(TrainForm)]
    parameters.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                        annotation=gr.Request))
    signature = inspect.Signature(parameters)  # a bound method shows it without `self`

    def split(args: tuple, kwargs: dict) -> tuple:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        return values["self"], TrainForm(**{name: values[name] for name in FORM_FIELDS}), values["request"]
    if inspect.isgeneratorfunction(method):
        def handler(*args, **kwargs):
            self, form, request = split(args, kwargs)
            yield from method(self, form, request)
    else:
        def handler(*args, **kwargs):
            self, form, request = split(args, kwargs)
            return method(self, form, request)
    handler.__name__, handler.__qualname__, handler.__doc__ = method.__name__, method.__qualname__, method.__doc__
    handler.__signature__ = signature
    handler.__annotations__ = {"request": gr.Request}  # Gradio finds the request by this annotation
    return handler


@dataclass(frozen=True)
class Recipe:
    """The tab's inputs after validation: what to train, on what, and how."""

    preset: str
    corpus: str
    text: str | None  # pasted or uploaded text; None for a built-in corpus
    tokenizer: str
    stage: str
    model: dict  # MODEL_FIELDS
    train: dict  # TrainConfig overrides

    def configs(self, vocab_size: int):
        """(GPTConfig, TrainConfig) from the preset, overridden by this recipe."""
        with validate.user_errors():
            # A stage's options win over the sliders (the one-head stage forces n_head=1); a break-it
            # switch turns a part off on top of the stage, never on where the stage leaves it out.
            options = {**{k: v for k, v in self.model.items() if k not in BREAK_IT}, **STAGES[self.stage].options,
                       **self.train}
            for name in BREAK_IT:
                if not self.model[name]:
                    options.update(_switched_off(name))
            return preset_configs(self.preset, vocab_size, **options)

    @property
    def task(self) -> Task | None:
        """The synthetic task the corpus is, if it is one."""
        return CORPORA[self.corpus].task if self.corpus in CORPORA else None

    @property
    def corpus_title(self) -> str:
        return CORPORA[self.corpus].title if self.corpus in CORPORA else ("your text" if self.corpus == PASTE else "your file")


class FormRules:
    """How the form is read: every check a request's values pass, the presets' forms and the caps."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def recipe(self, form: TrainForm) -> Recipe:
        """Check every input (the browser is no guarantee) and read pasted or uploaded text."""
        s, f = self.settings, form
        preset = validate.choice(f.preset, "Preset", PRESETS)
        corpus = validate.choice(f.corpus, "Corpus", [name for _, name in CORPUS_CHOICES])
        tokenizer = validate.choice(f.tokenizer, "Tokenizer", [name for _, name in TOKENIZER_CHOICES])
        stage = validate.choice(f.stage, "Stage", STAGES)
        model = dict(
            n_layer=validate.integer(f.n_layer, "Layers", 1, s.max_layers, cap=s.cap_hint("max_layers")),
            n_head=validate.integer(f.n_head, "Heads", 1, s.max_heads, cap=s.cap_hint("max_heads")),
            n_embd=validate.integer(f.n_embd, "Embedding size", 1, s.max_embd, cap=s.cap_hint("max_embd")),
            block_size=validate.integer(f.block_size, "Block size", 1, s.max_block_size,
                                        cap=s.cap_hint("max_block_size")),
            dropout=validate.number(f.dropout, "Dropout", 0.0, 0.9),
            **{name: _switch(getattr(f, name), label) for name, (label, _) in BREAK_IT.items()},
            position=validate.choice(f.position, "Positions", [name for _, name in POSITION_CHOICES]),
            norm=validate.choice(f.norm, "Normalisation", [name for _, name in NORM_CHOICES]),
            activation=validate.choice(f.activation, "Feed-forward", [name for _, name in ACTIVATION_CHOICES]),
            # 0 is off: GPTConfig's None (one key/value head per query head; every earlier key)
            n_kv_head=validate.integer(f.n_kv_head, "Key/value heads", 0, s.max_heads) or None,
            window=validate.integer(f.window, "Window", 0, s.max_block_size) or None,
        )
        if model["n_kv_head"] == model["n_head"]:
            model["n_kv_head"] = None  # as many as query heads: plain multi-head attention
        steps = validate.integer(f.steps, "Steps", 1, s.max_iters, cap=s.cap_hint("max_iters"))
        train = dict(
            max_iters=steps,
            lr_decay_iters=steps,
            batch_size=validate.integer(f.batch_size, "Batch size", 1, s.max_batch_size,
                                        cap=s.cap_hint("max_batch_size")),
            learning_rate=validate.number(f.learning_rate, "Learning rate", 1e-6, 1.0),
            seed=validate.integer(f.seed, "Seed", 0, 2**31 - 1),
            warmup_iters=validate.integer(f.warmup, "Warmup steps", 0, s.max_iters),
            eval_interval=validate.integer(f.eval_interval, "Evaluate every", 1, s.max_iters),
            weight_decay=validate.number(f.weight_decay, "Weight decay", 0.0, 1.0),
            grad_clip=validate.number(f.grad_clip, "Gradient clip", 0.0, 100.0),
            sample_tokens=SAMPLE_TOKENS,  # the live sample's length (the UI decides when to draw one)
        )
        # The schedule decays to the preset's floor, never above the chosen rate.
        train["min_lr"] = min(train["learning_rate"], get_preset(preset).train.get("min_lr", train["learning_rate"] / 10))
        user_text = None
        with validate.user_errors():
            if corpus == PASTE:
                text = validate.text(f.text, "Your text", s.max_text_chars, cap=s.cap_hint("max_text_chars"))
                # The character cap above is the limit; UTF-8 takes at most 4 bytes per character.
                user_text = check_user_text(text, min_chars=model["block_size"], max_bytes=4 * s.max_text_chars)
            elif corpus == UPLOAD:
                if not f.upload:
                    raise gr.Error("Upload a .txt file first (or pick another corpus).")
                user_text = read_text_file(upload_path(f.upload), min_chars=model["block_size"], max_bytes=s.max_text_chars)
        return Recipe(preset, corpus, user_text, tokenizer, stage, model, train)

    def check_size(self, config: GPTConfig) -> dict[str, int]:
        """The parameter counts of a model of `config` (`GPT.parameter_counts`), after checking the cap."""
        counts = dict(_parameter_counts(tuple(getattr(config, field.name) for field in dataclasses.fields(config))))
        total = counts["total"]
        if total > self.settings.max_params:
            raise gr.Error(
                f"This model has {total:,} parameters; the limit is {self.settings.max_params:,}. "
                f"Make it smaller (fewer layers or channels; GPT-2 BPE adds 50,257 x n_embd per embedding). "
                + self.settings.cap_hint("max_params")
            )
        return counts

    def describe_setup(self, preset: str, corpus: str) -> str:
        """The preset's description, or what the form now trains once the corpus is another one."""
        info = get_preset(validate.choice(preset, "Preset", PRESETS))
        corpus = validate.choice(corpus, "Corpus", [name for _, name in CORPUS_CHOICES])
        if corpus == info.corpus:
            return info.description
        title = dict((name, title) for title, name in CORPUS_CHOICES)[corpus]
        about = CORPORA[corpus].description if corpus in CORPORA else "Your own text: the model learns to continue it."
        return f"**{title}** with the model and training settings of the *{info.title}* preset. {about}"

    def apply_preset(self, name: str) -> dict[str, Any]:
        """The preset's form (capped to this server) by field name, and its description ("preset_info")."""
        preset = get_preset(validate.choice(name, "Preset", PRESETS))
        s, model, train = self.settings, preset.model, preset.train
        n_head = min(model["n_head"], s.max_heads)
        capped = {  # the channels split evenly among the heads: a multiple of their number
            "n_layer": min(model["n_layer"], s.max_layers), "n_head": n_head,
            "n_embd": min(model["n_embd"], s.max_embd - s.max_embd % n_head),
            "block_size": min(model["block_size"], s.max_block_size),
            "batch_size": min(train["batch_size"], s.max_batch_size), "steps": min(train["max_iters"], s.max_iters),
        }
        asked = {**model, **train, "steps": train["max_iters"]}
        reduced = [f"{k} {asked[k]} → {v}" for k, v in capped.items() if v != asked[k]]
        info = preset.description
        if reduced:
            info += f"\n\n⚠️ Reduced to this server's caps: {', '.join(reduced)} (lift them locally with `--no-caps`)."
        config = GPTConfig(vocab_size=2, **model)
        stage = stage_of(config) or "gpt"
        return {
            "preset_info": info, "corpus": preset.corpus, "tokenizer": preset.tokenizer,
            "stage": stage, **capped, **switches(config, stage), **modern_parts(config),
            "dropout": model.get("dropout", 0.0), "learning_rate": train["learning_rate"],
            "warmup": train.get("warmup_iters", 0), "eval_interval": train.get("eval_interval", 100),
            "weight_decay": train.get("weight_decay", 0.1), "grad_clip": train.get("grad_clip", 1.0),
        }

    def default_form(self) -> TrainForm:
        """What the tab shows when it opens: the default preset."""
        values = self.apply_preset(DEFAULT_PRESET)
        return TrainForm(preset=DEFAULT_PRESET, **{k: v for k, v in values.items() if k in FORM_FIELDS})

    def check_caps(self, config: GPTConfig) -> None:
        s = self.settings
        for field, name, cap in (("n_layer", "Layers", "max_layers"), ("n_head", "Heads", "max_heads"),
                                 ("n_embd", "Embedding size", "max_embd"), ("block_size", "Block size", "max_block_size")):
            validate.integer(getattr(config, field), f"The checkpoint's {name.lower()}", 0, getattr(s, cap),
                             cap=s.cap_hint(cap))
        # a window as the form takes it: no longer than the context (the form could not show or train it)
        validate.integer(config.window or 0, "The checkpoint's window", 0, config.block_size)
        self.check_size(config)


@functools.lru_cache(maxsize=256)
def _parameter_counts(config_fields: tuple) -> dict[str, int]:
    """Counted on a model built on the meta device (no memory); cached, as sixty learners pressing Train
    with the same form would build the same one sixty times."""
    with torch.device("meta"):
        return GPT(GPTConfig(*config_fields)).parameter_counts()


def upload_path(upload) -> str:
    """gr.File gives a path string (type='filepath'); the API may send a dict with a path."""
    path = upload.get("path") if isinstance(upload, dict) else upload
    if not isinstance(path, str):
        raise gr.Error("The upload did not arrive as a file.")
    return path


def _switch(value: Any, name: str) -> bool:
    """A break-it checkbox: True or False (a shared link writes 1 or 0); a string such as "false" is refused."""
    return bool(validate.choice(value, name, (True, False)))


def _switched_off(name: str) -> dict[str, Any]:
    """The GPTConfig fields a break-it switch sets when it is off: the position switch reads
    `GPTConfig.use_position_embedding`, which position "none" turns off; the others are fields."""
    return {"position": "none"} if name == "use_position_embedding" else {name: False}


def switches(config: GPTConfig, stage: str | None) -> dict[str, bool]:
    """The break-it checkboxes that show a model: off only where the model lacks a part its stage has
    (a bigram has no position embedding by its stage, not by a switch)."""
    by_stage = GPTConfig(vocab_size=2, **STAGES[stage].options) if stage else None
    return {name: bool(getattr(config, name)) or (by_stage is not None and not getattr(by_stage, name))
            for name in BREAK_IT}


def modern_parts(config: GPTConfig) -> dict[str, Any]:
    """The Modern parts fields that show a model (0 where an option is off)."""
    return {name: getattr(config, name) or 0 for name in MODERN}


def stage_choices(norm: str = "layernorm") -> list[tuple[str, str]]:
    """The Stage dropdown's choices for a model normalised by `norm`: the lecture's full GPT has LayerNorm,
    one built with RMSNorm is named so."""
    return [(f"{i + 1}. {stage.title.replace('LayerNorm', NORM_NAMES[norm])}: {stage.description}", name)
            for i, (name, stage) in enumerate(STAGES.items())]


def position_switch_label(position: str = "learned") -> str:
    """The position switch's label as the model has its positions: a table ("Position embeddings") only
    with learned positions; RoPE and ALiBi compute theirs, and "none" has none, whatever the switch."""
    if position == "learned":
        return BREAK_IT["use_position_embedding"][0]
    return f"Positions: {dict((value, label) for label, value in POSITION_CHOICES)[position]}, no position table"


def described_parts(norm: str, position: str) -> tuple:
    """The Stage dropdown and the position switch naming the parts the form's model is built with (the
    Modern parts fields): a Llama-style model's stage says RMSNorm, its switch says RoPE."""
    norm = validate.choice(norm, "Normalisation", NORM_NAMES)
    position = validate.choice(position, "Positions", [value for _, value in POSITION_CHOICES])
    return gr.update(choices=stage_choices(norm)), gr.update(label=position_switch_label(position))


def heads_for_stage(stage: str):
    """The Heads slider as the stage uses it: fixed at 1 for one head, idle without attention."""
    options = STAGES[validate.choice(stage, "Stage", STAGES)].options
    if "n_head" in options:
        return gr.update(value=options["n_head"], interactive=False, info="this stage has exactly one head")
    if not options.get("use_attention", True):
        return gr.update(interactive=False, info="no attention at this stage")
    return gr.update(interactive=True, info=None)


def layers_for_stage(stage: str):
    """The Layers slider as the stage uses it: idle where the stage fixes the depth (its value stays,
    for the stages that take it)."""
    options = STAGES[validate.choice(stage, "Stage", STAGES)].options
    if "n_layer" in options:
        return gr.update(interactive=False, info=f"this stage has {options['n_layer']} layer, as in the lecture: "
                                                 "without residual connections, stacked layers do not train")
    return gr.update(interactive=True, info=None)
