"""The teacher's link: the page's address sets up the Train tab, as TensorFlow Playground does.

    http://host:7860/?preset=sort&seed=7&n_layer=3&hide=training&lock=model

- `preset=` fills the form as picking that preset does; every other key named after a field of
  `TrainForm` (all but the pasted text and the uploaded file) then overrides that field.
- `hide=` and `lock=` name groups of fields (`GROUPS`, one per accordion of the form), separated by
  commas: a hidden group's accordion is not shown; a locked group's fields, and the controls that
  would fill them (the preset, a checkpoint upload), cannot be changed in the page.
- Every value is checked by the form's own rules (`FormRules.recipe`); whatever is unknown or
  invalid is ignored and named in one note on the page.

**Share this setup** makes the link from the form: the preset, the seed, the fields that differ from
the preset's own, and the page's hidden and locked groups. Training is deterministic given the form
(the seed draws the weights and the batches), so the same link trains the same curve.

A lock is a classroom convenience, not security: the API takes any form, and a learner can edit the
link. Whatever the page locks, the handlers check everything that reaches the server.

Reads forms with the form's own rules (`form`). Never imports the run, the replay, the checkpoints
or the layout: the layout wires the link, and the link knows only the form.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import gradio as gr

from core.presets import PRESETS, get_preset
from playground import validate
from playground.context import AppContext
from playground.gradio_internals import Dependency, descendants
from playground.tabs.train.form import DEFAULT_PRESET, FORM_FIELDS, PASTE, UPLOAD, FormRules, TrainForm

# The form's groups, one per accordion of the Train tab, by its title (`wire` checks the layout).
# The preset sits above them all.
GROUPS: dict[str, tuple[str, ...]] = {
    "data": ("corpus", "text", "upload", "tokenizer"),
    "model": ("stage", "n_layer", "n_head", "n_embd", "block_size", "dropout", "causal", "scale_attention",
              "use_position_embedding"),
    "training": ("steps", "batch_size", "learning_rate", "seed", "warmup", "eval_interval", "weight_decay",
                 "grad_clip"),
    "modern": ("position", "norm", "activation", "n_kv_head", "window"),
}
NOT_LINKED = ("text", "upload")  # a file cannot travel in a link, and pasted text is too long for one
LINKED = tuple(name for name in FORM_FIELDS if name not in NOT_LINKED)  # the preset first
VIEWS = ("hide", "lock")  # the keys whose values name groups
OTHER_KEYS = ("room",)  # keys of a link that other parts of the page read (`playground.tabs.train.room`)
MAX_QUERY_CHARS = 2000  # of a link's query, decoded; every field and group in one takes about 310
SHOWN_CHARS = 40  # of a key or value echoed in the note
# The page's own address, as the browser sees it: right behind a proxy, unlike the Host header.
PAGE_ADDRESS = "window.location.origin + window.location.pathname"
if sorted(name for fields in GROUPS.values() for name in fields) != sorted(set(FORM_FIELDS) - {"preset"}):
    raise RuntimeError("link.GROUPS must hold every field of TrainForm but the preset, once")


@dataclass(frozen=True)
class View:
    """The groups a page's link hid and locked."""

    hide: tuple[str, ...] = ()
    lock: tuple[str, ...] = ()

    @property
    def locked_fields(self) -> tuple[str, ...]:
        """The locked groups' fields that a link sets (a learner still pastes or uploads their text)."""
        return tuple(name for group in self.lock for name in GROUPS[group] if name in LINKED)


@dataclass(frozen=True)
class Setup:
    """What a link asks for: the whole form by field name (the preset's, then the link's fields), the
    fields the link set, the view, and each part of the link that was ignored, with why."""

    values: dict[str, Any]
    applied: tuple[str, ...]
    view: View
    ignored: tuple[str, ...]


def parse(query: Iterable[tuple[str, str]], handlers: FormRules) -> Setup:
    """The setup a link's query (its decoded key, value pairs) asks for; whatever the query holds,
    it raises nothing."""
    query = list(query)
    size = len("&".join(f"{key}={value}" for key, value in query))
    if size > MAX_QUERY_CHARS:
        return Setup(preset_values(handlers, DEFAULT_PRESET), (), View(),
                     (f"the whole link ({size:,} characters; at most {MAX_QUERY_CHARS:,})",))
    fields: dict[str, str] = {}  # a repeated field: the last one counts, as in a form
    views: dict[str, list[str]] = {key: [] for key in VIEWS}
    ignored = []
    for key, value in query:
        if key in VIEWS:
            for group in filter(None, value.split(",")):
                if group not in GROUPS:
                    ignored.append(f"{key}={_cut(group)} (the groups are {', '.join(GROUPS)})")
                elif group not in views[key]:
                    views[key].append(group)
        elif key in LINKED:
            fields[key] = value
        else:
            ignored.append(f"{_cut(key)} (not a setting)")
    values, applied = preset_values(handlers, DEFAULT_PRESET), []
    for name in LINKED:  # the preset first: the fields after it override its own
        if name not in fields:
            continue
        try:
            if name == "preset":
                values = preset_values(handlers, fields[name])
            else:
                candidate = {**values, name: _typed(fields[name])}
                check(handlers, candidate)
                values = candidate
            applied.append(name)
        except gr.Error as error:
            ignored.append(f"{name}={_cut(fields[name])} ({_first_sentence(error.message)})")
    return Setup(values, tuple(applied), View(tuple(views["hide"]), tuple(views["lock"])), tuple(ignored))


def link(base: str, values: dict[str, Any], view: View, handlers: FormRules) -> str:
    """The address that opens `base` with this form and view: the preset, the seed, and the fields
    that differ from the preset's own. Raises gr.Error (naming the field) if the form is invalid."""
    base = validate.text(base, "The page's address", MAX_QUERY_CHARS)
    if not base.startswith(("http://", "https://")):
        raise gr.Error("The page's address must start with http:// or https://.")
    check(handlers, values)
    defaults = preset_values(handlers, values["preset"])
    query = {"preset": values["preset"], "seed": as_text(values["seed"])}
    query.update({name: as_text(values[name]) for name in LINKED
                  if name not in query and as_text(values[name]) != as_text(defaults[name])})
    query.update({key: ",".join(groups) for key, groups in zip(VIEWS, (view.hide, view.lock)) if groups})
    return f"{base}?{urlencode(query, safe=',')}"


def preset_values(handlers: FormRules, preset: Any) -> dict[str, Any]:
    """The whole form as picking `preset` fills it (gr.Error for an unknown preset)."""
    filled = handlers.apply_preset(preset)
    return dataclasses.asdict(TrainForm(preset=preset, **{k: v for k, v in filled.items() if k in FORM_FIELDS}))


def check(handlers: FormRules, values: dict[str, Any]) -> None:
    """The form's own checks (`FormRules.recipe`), raising gr.Error. Pasted or uploaded text comes
    after the link, so a paste or upload corpus is checked with the preset's corpus in its place."""
    form = TrainForm(**{name: values[name] for name in FORM_FIELDS if name in values})
    if form.corpus in (PASTE, UPLOAD):
        preset = validate.choice(form.preset, "Preset", PRESETS)
        form = dataclasses.replace(form, corpus=get_preset(preset).corpus)
    handlers.recipe(form)


def _typed(raw: str) -> Any:
    """A query value as the form holds it: a number where it reads as one (3.0 is 3), else the text."""
    try:
        number = float(raw)
    except ValueError:
        return raw
    return int(number) if number.is_integer() else number


def as_text(value: Any) -> str:
    """A checked form value as a link writes it, so that link -> form -> link gives the same link."""
    value = _typed(value) if isinstance(value, str) else value
    if isinstance(value, str):
        return value
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)


def note(setup: Setup) -> str:
    """One note (Markdown) on what the page's link set and what it ignored."""
    said = []
    if setup.applied or setup.view != View():
        said.append("This page's link set up the form.")
    if setup.view.hide:
        said.append(f"It hides {_titles(setup.view.hide)}.")
    if setup.view.lock:
        said.append(f"It locks {_titles(setup.view.lock)}, with the controls that would change it.")
    if setup.ignored:
        ignored = "; ".join(validate.as_markdown(part) for part in setup.ignored)
        said.append(f"\n\n⚠️ Ignored from the link: {ignored}.")
    return " ".join(said).strip()


def _titles(groups: tuple[str, ...]) -> str:
    return " and ".join(f"**{group.title()}**" for group in groups)


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def _first_sentence(message: str) -> str:
    """A check's message without the advice after it (how to lift a cap belongs to a host)."""
    return re.match(r".*?(\.(?=\s)|$)", message, re.DOTALL).group(0)


def keeping_locks(update: Callable[[Any], dict], field: str) -> Callable[[Any, View], dict]:
    """`update(value)`, a gr.update of the form's `field`, as a handler of (value, view) that leaves
    the field locked where the page's link locked it (a stage unlocks the Heads slider)."""
    def handler(value: Any, view: View) -> dict:
        result = update(value)
        return {**result, "interactive": False} if field in view.locked_fields else result
    handler.__name__ = update.__name__
    return handler


class FormSetter:
    """Sets the Train form from a `Setup`, as the page's link does when it opens and a room's lesson does when the
    teacher pushes one: the fields' values, the view's hidden and locked groups, and the controls that would fill
    a locked field (`writers`, each with its outputs) locked too."""

    def __init__(self, handlers: FormRules, form: dict[str, gr.Component], groups: dict[str, gr.Accordion], *,
                 view: gr.State, note_box: gr.Markdown, preset_info: gr.Markdown,
                 writers: list[tuple[gr.Component, list[gr.Component]]]) -> None:
        _check_layout(form, groups)
        self.handlers, self.form, self.groups, self.writers = handlers, form, groups, writers
        self.view, self.note_box, self.preset_info = view, note_box, preset_info
        self.outputs = [*form.values(), *groups.values(), *(writer for writer, _ in writers), view, note_box,
                        preset_info]

    def updates(self, setup: Setup, before: View = View(), note_text: str | None = None) -> dict:
        """The page's updates for `setup`, on a page whose view was `before`: what `before` locked or hid and
        `setup` does not is unlocked or shown again. The note says `note_text` (by default what the setup set)."""
        locked = {self.form[name] for name in setup.view.locked_fields}
        unlocked = {self.form[name] for name in before.locked_fields} - locked
        updates = {}
        for name in LINKED:
            component = self.form[name]
            lock = ({"interactive": False} if component in locked else
                    {"interactive": True} if component in unlocked else {})
            updates[component] = gr.update(value=setup.values[name], **lock)
        updates.update({self.groups[group]: gr.update(visible=False) for group in setup.view.hide})
        updates.update({self.groups[group]: gr.update(visible=True) for group in before.hide
                        if group not in setup.view.hide})
        for writer, outputs in self.writers:  # the preset is both a field and a writer
            if any(output in locked for output in outputs):
                updates[writer] = {**updates.get(writer, gr.update()), "interactive": False}
            elif any(output in unlocked for output in outputs):
                updates[writer] = {**updates.get(writer, gr.update()), "interactive": True}
        said = note(setup) if note_text is None else note_text
        updates.update({self.view: setup.view, self.note_box: gr.update(value=said, visible=bool(said)),
                        self.preset_info: _preset_info(self.handlers, setup.values)})
        return updates


def wire(ctx: AppContext, setter: FormSetter, *, button: gr.Button, link_box: gr.Textbox) -> Dependency:
    """Open the page's link when it loads (with `setter`), and make one on `button`. Returns the page-load event
    that opens the link (what must follow it can `.then` it)."""
    handlers, form = setter.handlers, setter.form

    def open_link(request: gr.Request) -> dict:
        # a key another part of the page reads (a room's code) is no setting of the form
        query = [(key, value) for key, value in request.query_params.multi_items() if key not in OTHER_KEYS]
        if not query:
            return {setter.note_box: gr.skip()}  # nothing to change (an empty dict would be one output's value)
        # Locked in this page only: the API still takes any form (a classroom convenience, not security).
        return setter.updates(parse(query, handlers))

    def share_setup(page_view: View, *args) -> dict:
        *values, base = args
        return gr.update(value=link(base, dict(zip(LINKED, values)), page_view, handlers), visible=True)

    quiet = dict(**ctx.cheap(), api_visibility="private", show_progress="hidden")  # no spinner over the form
    loaded = ctx.demo.load(open_link, None, setter.outputs, **quiet)
    inputs = [setter.view, *(form[name] for name in LINKED), link_box]
    # The page's address replaces the last input (the link box's old value) on its way to the server.
    button.click(share_setup, inputs, link_box, **quiet,
                 js=f"(...args) => [...args.slice(0, {len(inputs) - 1}), {PAGE_ADDRESS}]")
    return loaded


def _preset_info(handlers: FormRules, values: dict[str, Any]) -> str:
    """The preset's description (with its caps note), or what the form trains on another corpus."""
    preset, corpus = values["preset"], values["corpus"]
    if corpus == get_preset(preset).corpus:
        return handlers.apply_preset(preset)["preset_info"]
    return handlers.describe_setup(preset, corpus)


def _check_layout(form: dict[str, gr.Component], groups: dict[str, gr.Accordion]) -> None:
    """GROUPS names the accordions and the fields inside each, as the tab lays them out."""
    if set(groups) != set(GROUPS):
        raise RuntimeError(f"the Train tab's accordions {sorted(groups)} do not match link.GROUPS {sorted(GROUPS)}")
    for group, fields in GROUPS.items():
        inside = set(descendants(groups[group]))
        found = {name for name, component in form.items() if component in inside}
        if found != set(fields):
            raise RuntimeError(f"link.GROUPS[{group!r}] does not match its accordion: {sorted(found ^ set(fields))}")
