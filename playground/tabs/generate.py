"""Generate tab: text streams in token by token; click a token to see what else the model considered.

Events: /generate (streams), /inspect_token (one token's probability and top alternatives), and
UI-only ones that mark the inspected token in the shaded text.

A model trained on a synthetic task (core.data.Task) writes its lines: its prompt starts on a new line,
as every line it trained on did, and the status says so, and names the prompt's questions unlike
any it trained on (a word of another length, say), whose answers are guesses. It stops at the end of
its answer line (the newline, ↵, that ends every line it trained on) unless the learner unticks
"Stop at the end of the answer line": past it the model writes a next question, random letters it
was never taught, and the status says where it stopped.

A learner's mistake never marks the outputs as failed. A request the model cannot serve (no model
yet, characters it has never seen, a prompt longer than its context, a job already running) is
answered in the status with a warning toast, and the previous output stays as it was. Every event
of the tab runs with show_progress="hidden", so even a raised gr.Error (a field out of range) is a
toast only, never an "Error" badge over the tokens.

Never imports another tab.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import gradio as gr

from core.sample import TokenStep, stream
from core.data import LINE_START
from core.tokenizers import CharTokenizer, GPT2Tokenizer, Tokenizer, visible
from playground import model_picker, validate
from playground.context import AppContext
from playground.figures.generation import CHOSEN_COLOR, alternatives_figure
from playground.sessions import Session, TrainedModel

UI_INTERVAL_S = 0.2  # stream at most 5 updates a second
STOP_WAIT_S = 5.0  # how long Stop waits for the cancelled stream to end
N_ALTERNATIVES = 8
NO_MODEL = ("There is no model yet: train one on the **Train** tab (or upload a checkpoint there), "
            "or pick a pretrained model above.")
SEED_MAX = 2**31 - 1
NO_MASK_WRITES = ("Without the causal mask it learned to read each next token from the text after it, and as it "
                  "writes there is no text after it: expect garbage.")
# Tokens are shaded by probability in bands, light grey to dark indigo: confidence, not alarm.
# HighlightedText draws each colour at half opacity under black text, so even the darkest reads well.
PROBABILITY_BANDS = (  # (lowest probability, legend label, colour)
    (0.0, "under 10%", "#d1d5db"),
    (0.1, "10–30%", "#c7d2fe"),
    (0.3, "30–60%", "#a5b4fc"),
    (0.6, "60–90%", "#818cf8"),
    (0.9, "90% or more", "#4f46e5"),
)
INSPECTED = "inspected token"  # the clicked token's category: amber, as its bar in the chart
COLOR_MAP = {label: color for _, label, color in PROBABILITY_BANDS} | {INSPECTED: CHOSEN_COLOR}
MAX_UNKNOWN_SHOWN = 20  # characters of a refused prompt listed in the status
LINE_START_NOTE = ("↵ The prompt starts after a line break, as every line this model trained on did: that is how "
                   "the model finds where a question begins.")
STOP_AT_LINE_END = "Stop at the end of the answer line"
STOPPED_NOTE = (f"Stopped at the end of the answer line (↵): what follows it would be a new question of random "
                f"letters, which the model was never taught. Untick **{STOP_AT_LINE_END}** to let it go on.")
MAX_UNLIKE_SHOWN = 3  # a task model's questions unlike its training, listed in the status
MAX_VOCABULARY_SHOWN = 80  # entries (a character or a range like a–z) of a vocabulary listed
WHITESPACE_NAMES = {"\n": "newline", " ": "space", "\t": "tab", "\r": "carriage return"}


class Refusal(gr.Error):
    """A request the model cannot serve: `message` (a toast: no user text in it, since toasts render
    HTML) and `details` (Markdown for the status, where the user's characters are shown as code)."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message, print_exception=False)
        self.details = details


class GenerateHandlers:
    """The Generate tab's event handlers; `request` is a gr.Request or, in tests, a session id."""

    def __init__(self, ctx: AppContext) -> None:
        self.settings = ctx.settings
        self.registry = ctx.registry
        self.picker = model_picker.ModelPicker(ctx)

    def generate(self, prompt, max_new_tokens, temperature, top_k, top_p, seed, stop_at_line_end=True,
                 request: gr.Request = None) -> Iterator[tuple]:
        """Continue `prompt` with the session's model (or GPT-2 when picked), streaming token by token; a model
        trained on a task stops at the end of its answer line unless `stop_at_line_end` is false.

        A malformed field raises gr.Error; a request the model cannot serve yields one update with
        the tokens and text skipped (left as they were) and the reason in the status.

        Returns:
            (the tokens, each with its probability, the text, status), the last one when writing ends.
        """
        prompt, sampling = self._checked(prompt, max_new_tokens, temperature, top_k, top_p, seed)
        stop_at_line_end = validate.flag(stop_at_line_end, STOP_AT_LINE_END, default=True)
        try:
            running = self.registry.get(request).job_name  # an expired session raises: not a mistake
            if running:  # training, or a second Enter in the prompt while generating
                raise Refusal(f"This session is already running {running}; wait for it to finish or press Stop.")
            with self.registry.job(request, "generation") as session:
                reading = session.reading  # the session's model or a pretrained one, as the picker says
                prompt, prompt_ids = _model_prompt(reading, prompt)
                stop_tokens = _line_end(reading) if stop_at_line_end else []
                yield from _stream(session, reading, prompt, prompt_ids, dict(sampling, stop_tokens=stop_tokens))
        except Refusal as refusal:
            yield _refused(refusal)

    def _checked(self, prompt, max_new_tokens, temperature, top_k, top_p, seed) -> tuple[str, dict]:
        """The prompt and core.sample.stream's sampling arguments, each field checked."""
        s = self.settings
        prompt = validate.text(prompt, "Prompt", s.max_prompt_chars, allow_empty=True, cap=s.cap_hint("max_prompt_chars"))
        top_p = validate.number(top_p, "Top-p", 0.01, 1.0)
        seed = validate.integer(-1 if seed is None or seed == "" else seed, "Seed", -1, SEED_MAX)
        return prompt, dict(
            max_new_tokens=validate.integer(max_new_tokens, "Max new tokens", 1, s.max_new_tokens,
                                            cap=s.cap_hint("max_new_tokens")),
            temperature=validate.number(temperature, "Temperature", 0.0, 5.0),
            top_k=validate.optional_integer(top_k, "Top-k", 1, 1_000_000),
            top_p=None if top_p >= 1.0 else top_p,
            seed=None if seed == -1 else seed,
        )

    def inspect_token(self, index, request: gr.Request) -> tuple:
        """(alternatives figure, description) of generated token number `index` (1-based)."""
        index = validate.integer(index, "Token number", 1)
        steps = self.registry.get(request).last_steps
        if not steps:
            return alternatives_figure([], None), "Generate some text first."
        index = validate.integer(index, "Token number", 1, len(steps))
        step = steps[index - 1]
        label = next(label for token_id, label, _ in step.alternatives if token_id == step.token_id)
        title = f"Token {index}: {label}"
        return alternatives_figure(step.alternatives, step.token_id, title), _description(index, label, step)

    def show_token(self, index, request: gr.Request) -> tuple:
        """(token number, tokens with that one marked, figure, description) for the page: a number
        beyond the text (left from a longer one) shows the nearest token instead of an error."""
        session = self.registry.get(request)
        steps = session.last_steps
        if not steps:
            return gr.skip(), gr.skip(), *self.inspect_token(1, request)
        index = min(max(validate.integer(index, "Token number"), 1), len(steps))
        return index, _highlighted(_prompt_of(session), steps, inspected=index), *self.inspect_token(index, request)

    def select_token(self, event: gr.SelectData, request: gr.Request) -> tuple:
        """A click in the shaded text: entry 0 is the prompt, entry i the i-th generated token."""
        index = event.index if isinstance(event.index, int) else event.index[0]
        if index < 1:
            return gr.skip(), gr.skip(), gr.skip(), "That is the prompt; click a generated token."
        return self.show_token(index, request)

    def stopped(self, request: gr.Request) -> tuple:
        """Stop cancels the stream before its last update: (text, status) as it ended (show_token
        redraws the tokens). The cancelled stream finishes its current token first, so this waits
        for it: the count is then final, and no late "Generating..." update overwrites the status."""
        session = self.registry.get(request)
        deadline = time.monotonic() + STOP_WAIT_S
        while session.job_name == "generation" and time.monotonic() < deadline:
            time.sleep(0.02)
        if not session.last_steps:
            return gr.skip(), gr.skip()
        notes = _notes(session.reading, _prompt_of(session))
        return session.last_text, _with_notes(_done(session.last_steps), notes)

    def model_info(self, request: gr.Request) -> str:
        """One line about the model the tab reads (and why one built without the causal mask writes
        garbage), or what to do when there is none."""
        session = self.registry.peek(request)
        if session is None or session.reading is None:
            return NO_MODEL
        config = session.reading.model.config
        unmasked = f" {NO_MASK_WRITES}" if config.use_attention and not config.causal else ""
        return f"**Model:** {self.picker.described(session)}{unmasked}"

    def line_end_option(self, request: gr.Request):
        """The "Stop at the end of the answer line" checkbox, shown only for a model trained on a task."""
        session = self.registry.peek(request)
        reading = None if session is None else session.reading
        return gr.update(visible=reading is not None and reading.task is not None)


# ------------------------------------------------------------------ generation


def _model_prompt(reading: TrainedModel | None, prompt: str) -> tuple[str, list[int]]:
    """The prompt as the model the tab reads takes it, as text and token ids: a task model's starts on
    a new line, as the lines it trained on did. A Refusal if that model cannot take it."""
    if reading is None:
        raise Refusal(NO_MODEL.replace("**", ""))
    model, tokenizer, typed = reading.model, reading.tokenizer, prompt
    if reading.task is not None:
        prompt = reading.task.as_line(prompt)
    if isinstance(tokenizer, CharTokenizer):
        _check_characters(prompt, tokenizer)
    if not prompt:
        return prompt, [_start_token(tokenizer)]
    with validate.user_errors():
        ids = tokenizer.encode(prompt)
    if len(ids) > model.config.block_size:
        line_start = " (the line break before it included)" if prompt != typed else ""
        raise Refusal(f"The prompt is {len(ids)} tokens long{line_start}; this model's context is "
                      f"{model.config.block_size} tokens.", "Shorten the prompt (or train a model with a larger block size).")
    return prompt, ids


def _line_end(reading: TrainedModel) -> list[int]:
    """The token that ends a task model's answer line (the newline every line it trained on ended with);
    none for other models, which write on."""
    if reading.task is None:
        return []
    return reading.tokenizer.encode(LINE_START)


def _check_characters(prompt: str, tokenizer: CharTokenizer) -> None:
    """A Refusal naming the prompt's characters outside the vocabulary, and the ones inside it."""
    unknown = set(prompt) - set(tokenizer.chars)
    if not unknown:
        return
    some = "1 character of the prompt is" if len(unknown) == 1 else f"{len(unknown)} characters of the prompt are"
    raise Refusal(
        f"{some} not in this model's vocabulary, so nothing was generated.",
        f"Not in it: {_char_list(unknown, MAX_UNKNOWN_SHOWN)}.  \n"
        f"The model knows these {tokenizer.vocab_size} characters: "
        f"{_char_list(tokenizer.chars, MAX_VOCABULARY_SHOWN)}.  \n"
        "Use only those, or train a model on text that has the others.",
    )


def _stream(session: Session, reading: TrainedModel, prompt: str, prompt_ids: list[int],
            sampling: dict) -> Iterator[tuple]:
    """(tokens, text, status) at most every UI_INTERVAL_S, then the final one, from the model read; the
    session keeps the steps for inspection and the text for the Attention tab."""
    steps: list[TokenStep] = []
    session.last_steps, session.last_text = steps, prompt
    notes = _notes(reading, prompt)
    last_ui = 0.0
    with validate.user_errors():
        tokens = stream(reading.model, reading.tokenizer, prompt_ids, **sampling, generator=session.generator,
                        n_alternatives=N_ALTERNATIVES)
        for step in tokens:
            steps.append(step)
            session.last_text += step.text
            if time.monotonic() - last_ui >= UI_INTERVAL_S:
                last_ui = time.monotonic()
                status = _with_notes(f"Generating... {len(steps)} tokens", notes)
                yield _highlighted(prompt, steps), session.last_text, status
    stopped = steps and steps[-1].token_id in sampling["stop_tokens"]
    yield _highlighted(prompt, steps), session.last_text, _with_notes(_done(steps), STOPPED_NOTE if stopped else "",
                                                                      notes)


def _refused(refusal: Refusal) -> tuple:
    """The one update of a request that was not run: the reason in a warning toast and the status."""
    gr.Warning(refusal.message)
    return gr.skip(), gr.skip(), f"⚠️ {refusal.message}  \n{refusal.details}".strip()


def _done(steps: list[TokenStep]) -> str:
    return f"{len(steps)} tokens. Click a token (or type its number) to see what else the model considered."


def _notes(reading: TrainedModel | None, prompt: str) -> str:
    """For a task model, what the status says about `prompt` (as the model read it): that it starts on a
    new line, and which of its questions are unlike every one the model trained on. "" for other models."""
    task = reading.task if reading is not None else None
    if task is None:
        return ""
    notes = [LINE_START_NOTE]
    unlike = task.unlike_training(prompt)
    if unlike:
        shown = "; ".join(f"{_code(question) if question else 'an empty question'} {difference}"
                          for question, difference in unlike[:MAX_UNLIKE_SHOWN])
        more = f" (and {len(unlike) - MAX_UNLIKE_SHOWN} more)" if len(unlike) > MAX_UNLIKE_SHOWN else ""
        notes.append(f"⚠️ This model was trained on {task.questions()} before {_code(task.separator)}: "
                     f"{shown}{more}. It never saw such a question, so what it writes for one is a guess.")
    return "  \n".join(notes)


def _with_notes(status: str, *notes: str) -> str:
    """The status, then each note that is not empty on a line of its own."""
    return "  \n".join([status, *(note for note in notes if note)])


def _start_token(tokenizer: Tokenizer) -> int:
    """What an empty prompt starts from: GPT-2's end-of-text, or a newline, or the first character."""
    if isinstance(tokenizer, GPT2Tokenizer):
        return tokenizer.end_of_text
    if isinstance(tokenizer, CharTokenizer) and "\n" in tokenizer.chars:
        return tokenizer.encode("\n")[0]
    return 0


# ------------------------------------------------------------------ what the learner sees


def _highlighted(prompt: str, steps: list[TokenStep], inspected: int | None = None) -> list[tuple[str, str | None]]:
    """HighlightedText entries: the prompt unshaded, then each token in its probability band (the
    inspected one, 1-based, in its own colour). A newline token gets a visible ↵ before its line
    break, so it can be seen and clicked; so does a line break in the prompt."""
    return [(prompt.replace("\n", "↵\n"), None)] + [
        ((step.text or "�").replace("\n", "↵\n"), INSPECTED if number == inspected else _band(step.prob))
        for number, step in enumerate(steps, start=1)
    ]


def _band(prob: float) -> str:
    return next(label for low, label, _ in reversed(PROBABILITY_BANDS) if prob >= low)


def _prompt_of(session: Session) -> str:
    """The prompt of the session's last generation: its text less what the tokens added.
    (Read mid-stream, it can be one token off until the stream's next update redraws it.)"""
    generated = sum(len(step.text) for step in session.last_steps)
    return session.last_text[: len(session.last_text) - generated]


def _description(index: int, label: str, step: TokenStep) -> str:
    top_ids = [token_id for token_id, _, _ in step.alternatives[:N_ALTERNATIVES]]  # most likely first
    where = (f"its choice number {top_ids.index(step.token_id) + 1}" if step.token_id in top_ids
             else f"not among its {N_ALTERNATIVES} likeliest, but sampling drew it")
    return f"Token {index}, {_code(label)} (amber in the text): the model gave it {step.prob:.1%}, {where}."


def _char_list(chars, limit: int) -> str:
    """Characters as Markdown code, sorted, a run of letters or digits as one range (`a`–`z`), at
    most `limit` entries and then how many characters are left out."""
    entries: list[tuple[str, int]] = []  # (shown, how many characters it stands for)
    for run in _runs(chars):
        if len(run) >= 3 and run.isalnum():
            entries.append((f"{_char(run[0])}–{_char(run[-1])}", len(run)))
        else:
            entries += [(_char(ch), 1) for ch in run]
    shown = ", ".join(text for text, _ in entries[:limit])
    left_out = sum(n for _, n in entries[limit:])
    return f"{shown} … and {left_out:,} more" if left_out else shown


def _runs(chars) -> list[str]:
    """The distinct characters, sorted, grouped into runs of consecutive code points."""
    runs: list[str] = []
    for ch in sorted(set(chars)):
        if runs and ord(ch) == ord(runs[-1][-1]) + 1:
            runs[-1] += ch
        else:
            runs.append(ch)
    return runs


def _char(ch: str) -> str:
    """One character as Markdown code: whitespace drawn and named, invisible ones by code point."""
    if ch in WHITESPACE_NAMES:
        return f"{_code(visible(ch))} ({WHITESPACE_NAMES[ch]})"
    return _code(ch if ch.isprintable() else f"U+{ord(ch):04X}")


def _code(text: str) -> str:
    """`text` as a Markdown code span, so * _ < and friends show as themselves; the fence is one
    backtick longer than any run of backticks inside."""
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ------------------------------------------------------------------ layout


def build(ctx: AppContext) -> GenerateHandlers:
    s = ctx.settings
    handlers = GenerateHandlers(ctx)
    model_picker.build(ctx, "generate")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3, min_width=420):
            model_info = gr.Markdown(NO_MODEL, elem_id="generate-model-info")
            prompt = gr.Textbox(label="Prompt (empty = start from scratch)", lines=3, max_length=s.max_prompt_chars,
                                elem_id="prompt")
            with gr.Row():
                generate_btn = gr.Button("Generate", variant="primary", elem_id="generate-button")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="generate-stop")
            status = gr.Markdown("", elem_id="generate-status")
            tokens = gr.HighlightedText(
                label="Tokens, shaded by how probable the model found each (darker = more probable); click one",
                combine_adjacent=False, show_legend=True, color_map=COLOR_MAP, elem_id="generated-tokens",
            )
            text = gr.Textbox(label="Generated text", lines=6, interactive=False, elem_classes="mono",
                              buttons=["copy"], elem_id="generated-text")
        # What a click shows comes first here: beside the tokens on a wide screen, right after them on a phone.
        with gr.Column(scale=2, min_width=320):
            alternatives = gr.Plot(alternatives_figure([], None), label="What the model considered",
                                   elem_id="token-alternatives")
            token_info = gr.Markdown("", elem_id="token-info")
            token_index = gr.Number(value=1, precision=0, minimum=1, label="Inspect token number", elem_id="token-index")
            with gr.Group():
                max_new_tokens = gr.Slider(1, s.max_new_tokens, value=min(200, s.max_new_tokens), step=1,
                                           label="Max new tokens")
                temperature = gr.Slider(0.0, 2.0, value=0.8, step=0.05, label="Temperature (0 = always the likeliest)")
                top_k = gr.Number(value=0, precision=0, minimum=0, label="Top-k (0 = off)")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p (1 = off)")
                seed = gr.Number(value=-1, precision=0, minimum=-1, label="Seed (-1 = a new draw each time)")
                # Shown for a model trained on a task (line_end_option): past its answer line it writes junk.
                stop_at_line_end = gr.Checkbox(
                    True, label=STOP_AT_LINE_END, visible=False, elem_id="generate-stop-line",
                    info="A task model's answer ends with its line (↵); after it, it would write a new question of "
                         "random letters.")

    cheap = dict(**ctx.cheap(), show_progress="hidden")
    private = dict(api_visibility="private", **cheap)
    shown = [token_index, tokens, alternatives, token_info]
    form = [prompt, max_new_tokens, temperature, top_k, top_p, seed, stop_at_line_end]
    # The status says that it is generating, and the tokens stream in: no progress overlay, and so
    # no "Error" badge over the output either (see the module docstring).
    heavy = dict(**ctx.heavy("generate"), show_progress="hidden")
    run = generate_btn.click(handlers.generate, form, [tokens, text, status], api_name="generate", **heavy)
    submitted = prompt.submit(handlers.generate, form, [tokens, text, status], api_visibility="private", **heavy)
    for event in (run, submitted):
        event.then(handlers.show_token, token_index, shown, **private)
    # The cancel first, on its own: the status is only redrawn once the stream has ended.
    stop_btn.click(None, cancels=[run, submitted]).then(handlers.stopped, None, [text, status], **private).then(
        handlers.show_token, token_index, shown, **private)
    token_index.submit(handlers.inspect_token, token_index, [alternatives, token_info], api_name="inspect_token",
                       **cheap).success(handlers.show_token, token_index, shown, **private)
    tokens.select(handlers.select_token, None, shown, **private)
    ctx.follow_model(handlers.model_info, [], [model_info])
    ctx.follow_model(handlers.line_end_option, [], [stop_at_line_end])
    return handlers
