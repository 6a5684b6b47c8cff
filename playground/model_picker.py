"""The "Model" picker at the top of Generate and Attention: the session's own model or a pretrained one
(every model of `playground.pretrained.CATALOGUE`, in its order, then the GGUF files the operator offers).

    build(ctx, "generate")         # inside the tab's layout: the radio, its note, and their events

Choosing sets `session.pretrained` and `ctx.model_changed` to a description of what the tabs now
read, so every tab (and the other tab's picker) follows. When a pretrained model cannot be had, nothing
changes: the picker goes back to what the session reads, and its note says why, what the learner can do
meanwhile and, apart, how the server's operator provides the weights; it stays until the model changes.

Imports the context and the shared pretrained models (`playground.pretrained`). Never imports a tab.
"""

from __future__ import annotations

import gradio as gr

from playground import validate
from playground.context import AppContext
from playground.pretrained import Kind, describe, read_only_note, reading
from playground.sessions import Session

YOURS = "yours"


def choices(ctx: AppContext) -> list[tuple[str, str]]:
    """The picker's (label, value) pairs: the session's own model, then every model the server offers."""
    return [("Your model", YOURS)] + [(shared.kind.label, key) for key, shared in ctx.pretrained.items()]


class ModelPicker:
    """The handlers of the pickers: which model Generate and Attention read, per session."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def use_model(self, choice, request: gr.Request) -> tuple:
        """(the picker's value, the note under it, ctx.model_changed's new value). When a pretrained model
        cannot be had, the picker goes back to what is read, the reason in the note, and ctx.model_changed
        stays as it is: nothing changed, and its followers would wipe the note."""
        choice = validate.choice(choice, "Model", [value for _, value in choices(self.ctx)])
        session = self.ctx.registry.get(request)
        if choice == YOURS:
            session.pretrained = None
            return YOURS, "", self.described(session)
        kind = self.kind(choice)
        try:
            pretrained = self.ctx.pretrained[choice].get()
        except gr.Error as error:
            gr.Warning(error.message)
            read = YOURS if session.pretrained is None else session.pretrained.source
            reads = "your own model" if session.pretrained is None else self.kind(read).title
            return read, unavailable_note(kind, error.message, reads), gr.skip()
        if session.pretrained is None:
            # It holds no weights of its own, but its analyses are the largest a session keeps (144 heads):
            # their memory is claimed like a model's, so a flood of sessions cannot fill the memory with them.
            config = pretrained.model.config  # its analyses: float16 maps of every head at the longest text
            self.ctx.registry.claim_model(
                session, 2 * config.n_layer * config.n_head * self.ctx.settings.max_attention_tokens ** 2)
        if session.pretrained is None or session.pretrained.source != choice:
            session.pretrained = reading(kind, pretrained)
        return choice, read_only_note(kind, session.pretrained), self.described(session)

    def follow(self, request: gr.Request) -> tuple[str, str]:
        """The picker and its note as the session's choice is now (after any tab changed the model)."""
        session = self.ctx.registry.peek(request)
        if session is None or session.pretrained is None:
            return YOURS, ""
        source = session.pretrained.source
        return source, read_only_note(self.kind(source), session.pretrained)

    def kind(self, key: str) -> Kind:
        """The pretrained model the server offers under `key`."""
        return self.ctx.pretrained[key].kind

    def described(self, session: Session) -> str:
        """What Generate and Attention read, in one line ('' when nothing)."""
        if session.pretrained is not None:
            return describe(self.kind(session.pretrained.source), session.pretrained)
        return "" if session.trained is None else session.trained.describe()


def unavailable_note(kind: Kind, why: str, reads: str) -> str:
    """Under the picker when `kind` cannot be had: `why`, what the learner can do now (Generate and Attention
    still read `reads`), and apart, for the server's operator, how to provide the weights."""
    return (f"⚠️ **{kind.title} cannot be read here.** {why} Generate and Attention still read {reads}: the "
            "**Train** tab trains a model of your own in seconds, and everything on these tabs works on it.\n\n"
            f"*For whoever runs this server:* {kind.local_advice()}")


def build(ctx: AppContext, tab_id: str) -> gr.Radio:
    """The "Model" picker at the top of a tab (`tab_id` "generate" or "attention"): the same handlers on
    both tabs, public as /use_model on Generate's."""
    handlers = ModelPicker(ctx)
    with gr.Row(equal_height=True):
        choice = gr.Radio(choices(ctx), value=YOURS, label="Model", scale=1, min_width=260,
                          elem_id=f"{tab_id}-model-choice")
        with gr.Column(scale=2, min_width=280):  # on a phone the note wraps below the picker, full width
            note = gr.Markdown("", elem_id=f"{tab_id}-model-note")
    api = dict(api_name="use_model") if tab_id == "generate" else dict(api_name=f"{tab_id}_use_model",
                                                                        api_visibility="private")
    # Loading a pretrained model the first time takes seconds: it waits in line with the analyses, not the
    # cheap events.
    choice.input(handlers.use_model, choice, [choice, note, ctx.model_changed], **api, **ctx.heavy("attention"))
    ctx.follow_model(handlers.follow, [], [choice, note])
    return choice
