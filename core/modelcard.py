"""An exported model's card: README.md (YAML front matter for the Hub, then Markdown) and its loss curve,
a PNG beside it.

    write(folder, config=model.config, architecture="GPT2LMHeadModel", model_type="gpt2",
          tokenizer=tokenizer, meta=meta, parameters=model.parameter_counts()["total"], where="me/tiny-gpt")

The card has the model (its architecture and every option), the data, the training (steps, settings, the
final losses and the curve), the tokenizer, and the code that loads it. `meta` is a checkpoint's: the
app's (corpus, steps, history, train_config) or the command line's (preset, text_file, step, val_loss,
train_config, and the history from its trainer state).

Imports the config and the presets' corpora. Never imports the model, transformers, gradio, plotly or `playground`.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from core.config import GPTConfig
from core.data import CORPORA
from core.presets import PRESETS
from core.tokenizers import Tokenizer

CARD_FILE = "README.md"
CURVE_FILE = "loss_curve.png"
# Training settings that say how this machine ran, not how the model learned: left off the card.
MACHINE_SETTINGS = ("device", "compile", "dtype", "sample_interval", "sample_tokens", "attention_interval")
# The curve: the app's colours (playground.figures.training) on white.
CURVE_WIDTH, CURVE_HEIGHT = 720, 360
LEFT, TOP, RIGHT, BOTTOM = 64, 40, 24, 44  # margins around the plot, in pixels: room for the labels
TRAIN_COLOR, VAL_COLOR, AXIS_COLOR, GRID_COLOR, INK = "#6366f1", "#f59e0b", "#6b7280", "#e5e7eb", "#111827"
TICKS = 5


def write(folder: Path, *, config: GPTConfig, architecture: str, model_type: str, tokenizer: Tokenizer, meta: dict,
          parameters: int, where: str) -> None:
    """README.md in `folder`, and the loss curve beside it where `meta` has one (an older one removed
    where it has none). `where` is what the loading code passes to from_pretrained: a repo id or a folder."""
    history = meta.get("history") or []
    curve = folder / CURVE_FILE
    if history:
        curve.write_bytes(loss_curve_png(history))
    else:
        curve.unlink(missing_ok=True)
    text = card(config=config, architecture=architecture, model_type=model_type, tokenizer=tokenizer, meta=meta,
                parameters=parameters, where=where, curve=bool(history))
    (folder / CARD_FILE).write_text(text, encoding="utf-8")


def card(*, config: GPTConfig, architecture: str, model_type: str, tokenizer: Tokenizer, meta: dict, parameters: int,
         where: str, curve: bool) -> str:
    """The card's Markdown; `curve`: whether CURVE_FILE is beside it."""
    kind = tokenizer.spec()["kind"]
    history = meta.get("history") or []
    steps = meta.get("steps", meta.get("step")) or (history[-1]["step"] if history else 0)
    train_loss, val_loss = _last(history, "train_loss"), _last(history, "val_loss")
    if val_loss is None:  # a command-line checkpoint saved without its curve still says its last one
        val_loss = meta.get("val_loss")
    settings = {k: v for k, v in (meta.get("train_config") or {}).items() if k not in MACHINE_SETTINGS}
    prompt = tokenizer.decode([getattr(tokenizer, "end_of_text", 0)])  # any text in the vocabulary would do
    new_tokens = config.block_size - len(tokenizer.encode(prompt))
    tags = ["attention-playground", model_type] + (["character-level"] if kind == "char" else [])
    lines = [
        "---", "library_name: transformers", "pipeline_tag: text-generation", "tags:", *[f"- {t}" for t in tags], "---",
        "",
        "# A tiny GPT from Attention Playground",
        "",
        f"A {config.n_layer}-layer, {config.n_head}-head GPT with {config.n_embd} channels and {parameters:,} "
        f"parameters, trained with Attention Playground and exported as a `transformers` "
        f"`{architecture}`: its logits are the ones the playground computed.",
        "",
        "## Model",
        "",
        f"`{architecture}`, a context of {config.block_size} tokens. Every option of the playground's model:",
        "",
        "| option | value |", "| --- | --- |",
        *[f"| `{name}` | `{value}` |" for name, value in config.to_dict().items()],
        "",
        "## Data",
        "",
        _data(meta),
        "",
        "## Training",
        "",
        f"{steps:,} steps. Final losses (cross-entropy, nats per token): training {_loss(train_loss)} "
        f"(the last step's batch), validation {_loss(val_loss)}.",
        "",
    ]
    if curve:
        lines += [f"![The loss curve: training and validation loss over the steps]({CURVE_FILE})", ""]
    if settings:
        lines += ["| setting | value |", "| --- | --- |", *[f"| `{k}` | `{v}` |" for k, v in settings.items()], ""]
    lines += [
        "## Tokenizer",
        "",
        _tokenizer_text(tokenizer, kind),
        "",
        "## How to load it",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f"model = AutoModelForCausalLM.from_pretrained({where!r})",
        f"tokenizer = AutoTokenizer.from_pretrained({where!r})",
        f"inputs = tokenizer({prompt!r}, return_tensors='pt')",
        f"out = model.generate(**inputs, max_new_tokens={new_tokens}, do_sample=True)  "
        f"# the context holds {config.block_size} tokens",
        "print(tokenizer.decode(out[0]))",
        "```",
        "",
    ]
    return "\n".join(lines)


def _last(history: list[dict], key: str) -> float | None:
    """The last finite value of `key` in the history (validation losses are None between evaluations)."""
    return next((row[key] for row in reversed(history)
                 if isinstance(row.get(key), (int, float)) and math.isfinite(row[key])), None)


def _loss(value: float | None) -> str:
    return "not recorded" if value is None else f"{value:.4f}"


def _data(meta: dict) -> str:
    """What the model read: a corpus (the app names its title, the command line its preset) or a text file."""
    if meta.get("text_file"):  # only the file's name: the card may be public, the user's folders are not
        return f"A text file of its trainer's own, `{Path(meta['text_file']).name}`."
    preset = PRESETS.get(meta.get("preset"))
    title = meta.get("corpus") or (CORPORA[preset.corpus].title if preset else None)
    if title is None:
        return "Not recorded."
    info = next((info for info in CORPORA.values() if info.title == title), None)
    about = f": {info.description}" if info else "."
    via = f" (the `{preset.name}` preset)" if preset else ""
    return f"{title}{via}{about}"


def _tokenizer_text(tokenizer: Tokenizer, kind: str) -> str:
    if kind == "char":
        return (f"One token per character: `tokenizer.json` gives each of the {tokenizer.vocab_size} characters its "
                "id, in this order (as JSON):\n\n```json\n" + json.dumps(tokenizer.chars, ensure_ascii=False)
                + "\n```\n\nA character outside this vocabulary cannot be encoded.")
    if kind == "gpt2":
        return (f"GPT-2's byte-pair encoding ({tokenizer.vocab_size:,} tokens, `<|endoftext|>` the last), the same "
                "as `AutoTokenizer.from_pretrained(\"gpt2\")`.")
    return f"The pretrained model's own tokenizer ({tokenizer.vocab_size:,} tokens)."


# ---------------------------------------------------------------- the loss curve


def loss_curve_png(history: list[dict]) -> bytes:
    """Training and validation loss over the steps as a PNG (CURVE_WIDTH x CURVE_HEIGHT), drawn as the app
    draws it: training a thin line, validation a thicker one with a dot at each evaluation."""
    lines = {name: [(row["step"], row[key]) for row in history
                    if isinstance(row.get(key), (int, float)) and math.isfinite(row[key])]
             for name, key in (("training", "train_loss"), ("validation", "val_loss"))}
    points = [p for line in lines.values() for p in line]
    if not points:
        raise ValueError("the history has no finite losses to draw")
    steps, losses = [s for s, _ in points], [v for _, v in points]
    x0, x1 = min(steps), max(max(steps), min(steps) + 1)
    pad = 0.05 * (max(losses) - min(losses)) or 0.5  # a flat curve still gets a visible range
    y0, y1 = min(losses) - pad, max(losses) + pad
    width, height = CURVE_WIDTH - LEFT - RIGHT, CURVE_HEIGHT - TOP - BOTTOM

    def at(step: float, loss: float) -> tuple[float, float]:
        return LEFT + width * (step - x0) / (x1 - x0), TOP + height * (y1 - loss) / (y1 - y0)

    image = Image.new("RGB", (CURVE_WIDTH, CURVE_HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=13)  # Pillow's own font: no system fonts needed
    for i in range(TICKS):
        loss = y0 + (y1 - y0) * i / (TICKS - 1)
        step = round(x0 + (x1 - x0) * i / (TICKS - 1))
        _, y = at(x0, loss)
        x, _ = at(step, y0)
        draw.line([(LEFT, y), (LEFT + width, y)], fill=GRID_COLOR)
        draw.text((LEFT - 6, y), f"{loss:.2f}", fill=AXIS_COLOR, font=font, anchor="rm")
        draw.text((x, TOP + height + 6), f"{step:,}", fill=AXIS_COLOR, font=font, anchor="ma")
    draw.rectangle([LEFT, TOP, LEFT + width, TOP + height], outline=AXIS_COLOR)
    draw.text((LEFT + width / 2, CURVE_HEIGHT - 4), "step", fill=AXIS_COLOR, font=font, anchor="md")
    draw.text((LEFT, TOP / 2), "Loss (cross-entropy, nats per token)", fill=INK, font=font, anchor="lm")
    for (name, line), color, line_width in zip(lines.items(), (TRAIN_COLOR, VAL_COLOR), (1, 2)):
        xy = [at(step, loss) for step, loss in line]
        if len(xy) > 1:
            draw.line(xy, fill=color, width=line_width, joint="curve")
        if name == "validation":
            for x, y in xy:
                draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=color)
    legend_x = LEFT + width - 110
    for row, (name, color) in enumerate((("training", TRAIN_COLOR), ("validation", VAL_COLOR))):
        y = TOP / 2 + 14 * row - 7
        draw.line([(legend_x, y), (legend_x + 18, y)], fill=color, width=3)
        draw.text((legend_x + 24, y), name, fill=INK, font=font, anchor="lm")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
