"""The Gradio app: five tabs over one per-session registry, launched with secure defaults.

    from playground.app import build_app, launch_kwargs
    from playground.settings import Settings
    settings = Settings.from_env()
    demo = build_app(settings)
    demo.launch(**launch_kwargs(settings, routes=demo.routes))

Each tab is a module in `playground.tabs` with `build(ctx: AppContext) -> None`.

Imports every tab: the app is the top of the house (only `__main__`, the Space's `app.py` and tests
import it). Never imports core's model, training or analysis: the tabs use core; the app assembles them.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import gradio as gr
import torch
from fastapi.routing import APIRoute

from core.schedule import FairShare
from playground.context import AppContext
from playground.errors import GuardedBlocks, harden, unknown_event_handlers
from playground.gradio_internals import (
    event_handlers,
    forget_sessions,
    idle_sessions,
    page_closed,
    skip_missing_optional_imports,
)
from playground.rooms import Rooms
from playground.sessions import SessionRegistry, release_memory, reuse_freed_memory
from playground.settings import Settings
from playground.store import open_store
from playground.tabs import attention, baby, generate, ladder, room, train
from playground.zerogpu import zero_gpu

ASSETS = Path(__file__).resolve().parent.parent / "assets"
TITLE = "Attention Playground"
INTRO = (
    "Train a tiny GPT in your browser, generate text token by token, and look inside every "
    "attention head. Start on **Train** with the default task, then explore the other tabs."
)
CLOSE_MESSAGES = "() => document.querySelectorAll('.toast-close').forEach((button) => button.click())"
# Soft, with its indigo one shade darker wherever it colours text or lies under white text: indigo-500
# gives 3.6:1 on the labels' indigo-100 and 4.5:1 under white, short of WCAG AA's 4.5:1 for text
# (the axe audit in tests/test_a11y_browser.py checks every tab); grey-400 hints become grey-500.
THEME = gr.themes.Soft(primary_hue="indigo", secondary_hue="amber").set(
    color_accent="*primary_600",
    block_label_text_color="*primary_600",
    block_title_text_color="*primary_600",
    button_primary_background_fill="*primary_600",
    button_primary_background_fill_hover="*primary_700",
    checkbox_label_background_fill_selected="*primary_600",
    body_text_color_subdued="*neutral_500",
)
# (tab id, title, module with build(ctx))
TABS = (
    ("train", "Train", train),
    ("generate", "Generate", generate),
    ("attention", "Attention", attention),
    ("ladder", "Ladder", ladder),
    ("baby", "Baby GPT", baby),
    ("room", "Room", room),  # after Train: it pushes the Train tab's form (`ctx.lesson`)
)


def configure_torch(settings: Settings) -> None:
    """Give each torch op `settings.torch_threads` threads (1 on a shared server).

    On a 2-core server `train_slots` training steps compute at once beside generation and the web
    server itself. Tiny models gain almost nothing from intra-op parallelism, while several
    jobs each spawning a thread per core oversubscribe the CPU and make every request slow.
    One thread per op keeps each job on about one core and the server responsive.
    """
    torch.set_num_threads(settings.torch_threads)


def build_app(settings: Settings | None = None) -> gr.Blocks:
    settings = settings or Settings.from_env()
    configure_torch(settings)
    reuse_freed_memory()
    skip_missing_optional_imports()
    # The app's own log says one line per user error (playground.errors); other libraries keep to
    # warnings. A host's own logging setup wins (basicConfig does nothing then).
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("playground").setLevel(logging.INFO)
    registry = SessionRegistry(
        settings.model_memory_bytes, settings.session_ttl_s, api_ttl_s=settings.api_ttl_s,
        evict_idle_s=settings.evict_idle_s, set_aside_idle_s=settings.set_aside_idle_s,
        max_light_sessions=settings.max_light_sessions,
    )
    # Uploaded and returned files (corpora, checkpoints) older than an hour are deleted every half hour.
    with GuardedBlocks(title=TITLE, delete_cache=(1800, 3600)) as demo:
        gr.Markdown(f"# {TITLE}\n{INTRO}", elem_id="intro")
        model_changed = gr.Textbox(visible=False, elem_id="model-changed")
        with gr.Tabs() as tabs:
            ctx = AppContext(settings=settings, registry=registry, share=FairShare(settings.train_slots),
                             model_changed=model_changed, tabs=tabs, demo=demo,  # pretrained: loaded when read
                             store=open_store(settings.state_dir, settings.state_budget_bytes),
                             gpu=zero_gpu(settings.zero_gpu_chunk_s), gpu_turns=FairShare(settings.zero_gpu_slots))
            for tab_id, title, module in TABS:
                with gr.Tab(title, id=tab_id, elem_id=f"tab-{tab_id}") as tab:
                    module.build(ctx)
                # A message belongs to the tab it came from: switching tabs closes it (in the browser).
                tab.select(None, js=CLOSE_MESSAGES)
            ctx.wire_followers()
        if ctx.workers is not None:  # started now, in the background: ready before a room presses Train
            ctx.workers.start()
        # An open page has a heartbeat: its model may stay while the tab is open, and a closed tab
        # frees it now rather than when the sweep finds it.
        demo.load(_browser_marker(registry), None, None, api_visibility="private", **AppContext.cheap())
        demo.unload(_freer(registry))
    harden(demo)
    _name_tools(demo)
    registry.on_free(lambda session: forget_sessions(demo, [session.key]))
    _start_sweeper(demo, registry, ctx.rooms, settings)
    demo.queue(max_size=settings.max_queue_size, default_concurrency_limit=1)
    demo.registry = registry  # for tests and benchmarks: the sessions this app holds
    demo.store = ctx.store  # ... and where it keeps their models across restarts
    demo.workers = ctx.workers  # ... and the processes their trainings step in
    demo.rooms = ctx.rooms  # ... and the teachers' rooms
    demo.routes = ctx.routes  # ... and the plain routes served beside Gradio's (`launch_kwargs`)
    return demo


def _start_sweeper(demo: gr.Blocks, registry: SessionRegistry, rooms: Rooms, settings: Settings) -> threading.Thread:
    """A daemon thread that frees idle sessions and ends idle rooms even on a quiet server, and Gradio's own state of
    session hashes that hold no session of ours and have been idle for `api_ttl_s` (a flood of
    cheap calls, each with a new hash, leaves about 0.8 MB of Gradio state per hash behind)."""
    interval_s = min(30.0, settings.api_ttl_s / 2)  # often enough for the shortest time-to-live

    def sweep() -> None:
        registry.sweep()
        rooms.sweep()
        cutoff = datetime.datetime.now() - datetime.timedelta(seconds=settings.api_ttl_s)
        ours = registry.keys()  # Gradio also holds hashes the registry refused (too long, say)
        idle = [key for key in idle_sessions(demo, cutoff) if key not in ours]
        forget_sessions(demo, idle)
        if idle:
            release_memory()

    def sweep_forever() -> None:
        while True:
            time.sleep(interval_s)
            try:
                sweep()
            except Exception:  # a bug here must not end the sweeping for good
                logging.getLogger("playground").exception("the session sweep failed")

    thread = threading.Thread(target=sweep_forever, name="session-sweeper", daemon=True)
    thread.start()
    return thread


def _name_tools(demo: gr.Blocks) -> None:
    """Name each handler after its API name: Gradio's MCP server names a tool after its function, which
    would make /attention `analyse` and the Baby GPT's /baby_gpt_train `train_1`. Renames harden's
    wrappers (one per event), never the tabs' own functions."""
    for handler in event_handlers(demo):
        if handler.api_name:
            handler.fn.__name__ = handler.api_name


def _browser_marker(registry: SessionRegistry):
    def mark_browser(request: gr.Request) -> None:
        registry.mark_browser(request)

    return mark_browser


def _freer(registry: SessionRegistry):
    def free_session(request: gr.Request) -> None:
        # Gradio runs an unload event when a page's heartbeat stream ends (the tab closed), but like any
        # event it also answers a client that calls it by name or index: only the page's own unload frees.
        if not page_closed(request):
            raise gr.Error("A session is freed when its page closes, not by a call.")
        registry.free(request)

    return free_session


def launch_kwargs(settings: Settings, host: str = "127.0.0.1", port: int | None = None, mcp: bool = False,
                  routes: Sequence[APIRoute] = ()) -> dict:
    """`routes`: the app's own (`build_app(...).routes`: a room's page asks for its lesson there). Secure defaults: no share link, no monitoring endpoint, no extra served paths, an upload
    cap, server exceptions hidden (gr.Error messages are always shown), calls to unknown events
    answered 404 in one log line, no MCP server unless `mcp` (Gradio would read $GRADIO_MCP_SERVER)."""
    return dict(
        server_name=host,
        server_port=port,
        share=False,
        show_error=False,
        enable_monitoring=False,
        allowed_paths=[],
        max_file_size=settings.max_upload_bytes,
        state_session_capacity=settings.gradio_sessions,
        # Every training holds a worker thread while it waits for its turn; the rest serve everyone.
        max_threads=settings.train_concurrency + 40,
        ssr_mode=False,  # no Node server: one process, less memory
        theme=THEME,
        css_paths=[ASSETS / "style.css"],
        footer_links=["api", "gradio", "settings"],
        run_history=False,  # nothing recorded in the browser
        app_kwargs={"exception_handlers": unknown_event_handlers(), "routes": list(routes)},
        mcp_server=mcp,  # every public event a tool, named by its API name (_name_tools)
    )
