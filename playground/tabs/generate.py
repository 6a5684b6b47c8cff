"""Generate tab: text streams in token by token; click a token to see what else the model considered.

Events: /generate (streams), /inspect_token (one token's probability and top alternatives).
"""

from __future__ import annotations

import time

import gradio as gr

from core.sample import TokenStep, stream
from core.tokenizers import CharTokenizer, GPT2Tokenizer, Tokenizer
from playground import validate
from playground.context import AppContext
from playground.figures.generation import alternatives_figure

UI_INTERVAL_S = 0.2  # stream at most 5 updates a second
N_ALTERNATIVES = 8
NO_MODEL = "There is no model yet: train one on the **Train** tab (or upload a checkpoint there)."
SEED_MAX = 2**31 - 1


class GenerateHandlers:
    """The Generate tab's event handlers; `request` is a gr.Request or, in tests, a session id."""

    def __init__(self, ctx: AppContext) -> None:
        self.settings = ctx.settings
        self.registry = ctx.registry

    def generate(self, prompt, max_new_tokens, temperature, top_k, top_p, seed, request: gr.Request):
        """Stream (highlighted tokens, plain text, status) as the model writes."""
        s = self.settings
        prompt = validate.text(prompt, "Prompt", s.max_prompt_chars, allow_empty=True, cap=s.cap_hint("max_prompt_chars"))
        max_new_tokens = validate.integer(max_new_tokens, "Max new tokens", 1, s.max_new_tokens,
                                          cap=s.cap_hint("max_new_tokens"))
        temperature = validate.number(temperature, "Temperature", 0.0, 5.0)
        top_k = validate.optional_integer(top_k, "Top-k", 1, 1_000_000)
        top_p = validate.number(top_p, "Top-p", 0.01, 1.0)
        seed = validate.integer(-1 if seed is None or seed == "" else seed, "Seed", -1, SEED_MAX)
        with self.registry.job(request, "generation") as session:
            model, tokenizer = session.model, session.tokenizer
            if model is None:
                raise gr.Error(NO_MODEL.replace("**", ""))
            prompt_ids = self._prompt_ids(prompt, tokenizer, model.config.block_size)
            steps: list[TokenStep] = []
            session.last_steps, session.last_text = steps, prompt
            last_ui = 0.0
            with validate.user_errors():
                tokens = stream(
                    model, tokenizer, prompt_ids, max_new_tokens, temperature=temperature, top_k=top_k,
                    top_p=None if top_p >= 1.0 else top_p, seed=None if seed == -1 else seed,
                    generator=session.generator,
                    n_alternatives=N_ALTERNATIVES,
                )
                for step in tokens:
                    steps.append(step)
                    session.last_text += step.text
                    if time.monotonic() - last_ui >= UI_INTERVAL_S:
                        last_ui = time.monotonic()
                        yield _highlighted(prompt, steps), session.last_text, f"Generating... {len(steps)} tokens"
            yield (_highlighted(prompt, steps), session.last_text,
                   f"{len(steps)} tokens. Click a token (or pick its number) to see the alternatives.")

    def _prompt_ids(self, prompt: str, tokenizer: Tokenizer, block_size: int) -> list[int]:
        if not prompt:
            return [_start_token(tokenizer)]
        with validate.user_errors():
            ids = tokenizer.encode(prompt)
        if len(ids) > block_size:
            raise gr.Error(
                f"The prompt is {len(ids)} tokens long; this model's context is {block_size} tokens. "
                "Shorten the prompt (or train a model with a larger block size)."
            )
        return ids

    def inspect_token(self, index, request: gr.Request) -> tuple:
        """(alternatives figure, description) of generated token number `index` (1-based)."""
        index = validate.integer(index, "Token number", 1)
        steps = self.registry.get(request).last_steps
        if not steps:
            return alternatives_figure([], None), "Generate some text first."
        index = validate.integer(index, "Token number", 1, len(steps))
        step = steps[index - 1]
        label = repr(step.text) if step.text else "(part of a character)"
        title = f"Token {index}: {label}, probability {step.prob:.1%}"
        top_ids = [token_id for token_id, _, _ in step.alternatives[:N_ALTERNATIVES]]  # most likely first
        where = (f"the model's choice number {top_ids.index(step.token_id) + 1}" if step.token_id in top_ids
                 else f"not among the top {N_ALTERNATIVES}")
        return alternatives_figure(step.alternatives, step.token_id, title), f"{title}: {where}."

    def select_token(self, event: gr.SelectData, request: gr.Request) -> tuple:
        """A click in the highlighted text: entry 0 is the prompt, entry i the i-th generated token."""
        index = event.index if isinstance(event.index, int) else event.index[0]
        session = self.registry.get(request)
        if index < 1 or index > len(session.last_steps):
            return gr.skip(), gr.skip(), "That is the prompt; click a generated token."
        return (index, *self.inspect_token(index, request))

    @staticmethod
    def model_info(description: str) -> str:
        """The Train tab's one-line model description, or what to do when there is no model."""
        return f"**Model:** {description}" if description else NO_MODEL


def _start_token(tokenizer: Tokenizer) -> int:
    """What an empty prompt starts from: GPT-2's end-of-text, or a newline, or the first character."""
    if isinstance(tokenizer, GPT2Tokenizer):
        return tokenizer.end_of_text
    if isinstance(tokenizer, CharTokenizer) and "\n" in tokenizer.chars:
        return tokenizer.encode("\n")[0]
    return 0


def _highlighted(prompt: str, steps: list[TokenStep]) -> list[tuple[str, float | None]]:
    """HighlightedText entries: the prompt uncoloured, then each token coloured by its probability.

    A newline token gets a visible ↵ before its line break, so it can be seen and clicked."""
    return [(prompt, None)] + [
        ((step.text or "�").replace("\n", "↵\n"), round(step.prob, 3)) for step in steps
    ]


def build(ctx: AppContext) -> GenerateHandlers:
    s = ctx.settings
    handlers = GenerateHandlers(ctx)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3, min_width=420):
            model_info = gr.Markdown(NO_MODEL, elem_id="generate-model-info")
            prompt = gr.Textbox(label="Prompt (empty = start from scratch)", lines=3, max_length=s.max_prompt_chars,
                                elem_id="prompt")
            with gr.Row():
                generate_btn = gr.Button("Generate", variant="primary", elem_id="generate-button")
                stop_btn = gr.Button("Stop", variant="stop")
            status = gr.Markdown("", elem_id="generate-status")
            tokens = gr.HighlightedText(
                label="Tokens: the darker, the more probable the model found it (click one to inspect it)",
                combine_adjacent=False, show_legend=False, show_inline_category=False, elem_id="generated-tokens",
            )
            text = gr.Textbox(label="Generated text", lines=6, interactive=False, elem_classes="mono",
                              buttons=["copy"], elem_id="generated-text")
        with gr.Column(scale=2, min_width=320):
            with gr.Group():
                max_new_tokens = gr.Slider(1, s.max_new_tokens, value=min(200, s.max_new_tokens), step=1,
                                           label="Max new tokens")
                temperature = gr.Slider(0.0, 2.0, value=0.8, step=0.05, label="Temperature (0 = always the likeliest)")
                top_k = gr.Number(value=0, precision=0, minimum=0, label="Top-k (0 = off)")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p (1 = off)")
                seed = gr.Number(value=-1, precision=0, minimum=-1, label="Seed (-1 = a new draw each time)")
            token_index = gr.Number(value=1, precision=0, minimum=1, label="Inspect token number", elem_id="token-index")
            token_info = gr.Markdown("")
            alternatives = gr.Plot(alternatives_figure([], None), label="What the model considered",
                                   elem_id="token-alternatives")

    cheap = dict(**ctx.cheap(), show_progress="hidden")
    token_index.submit(handlers.inspect_token, token_index, [alternatives, token_info], api_name="inspect_token", **cheap)
    run = generate_btn.click(
        handlers.generate, [prompt, max_new_tokens, temperature, top_k, top_p, seed], [tokens, text, status],
        api_name="generate", **ctx.heavy("generate"),
    )
    run.then(handlers.inspect_token, token_index, [alternatives, token_info], api_visibility="private", **cheap)
    submitted = prompt.submit(
        handlers.generate, [prompt, max_new_tokens, temperature, top_k, top_p, seed], [tokens, text, status],
        api_visibility="private", **ctx.heavy("generate"),
    )
    submitted.then(handlers.inspect_token, token_index, [alternatives, token_info], api_visibility="private", **cheap)
    stop_btn.click(None, cancels=[run, submitted])
    tokens.select(handlers.select_token, None, [token_index, alternatives, token_info],
                  api_visibility="private", **cheap)
    ctx.model_changed.change(handlers.model_info, ctx.model_changed, model_info, api_visibility="private", **cheap)
    return handlers
