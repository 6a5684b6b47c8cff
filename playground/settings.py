"""What this server allows: caps on model size and work, session limits, concurrency.

A public Space or a workshop server keeps the defaults (sized for 2 CPU cores); a learner on a
laptop lifts the caps with `python -m playground --no-caps` (`Settings.local()`). Every cap can
also be set by an environment variable named `PLAYGROUND_<FIELD>` in upper case, e.g.
`PLAYGROUND_MAX_LAYERS=8`:

    settings = Settings.from_env()            # defaults, overridden by PLAYGROUND_* variables
    settings.max_layers                        # 6
    settings.cap_hint("max_layers")            # how a user lifts that cap, for error messages

Handlers enforce the caps through `playground.validate`, whose messages name the cap.

Never imports gradio, torch or a tab: settings are plain values, read before anything is built.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from core.schedule import default_slots

ENV_PREFIX = "PLAYGROUND_"
STACK_STEPS = ("auto", "on", "off")


@dataclass(frozen=True)
class Settings:
    # model size and work per request (the "caps"; the ones a laptop user may lift)
    max_layers: int = 6
    max_heads: int = 8
    max_embd: int = 256
    max_block_size: int = 256
    max_batch_size: int = 64
    max_params: int = 8_000_000  # weights + Adam state ~ 16 bytes each: 128 MB per training session
    max_iters: int = 5000
    max_new_tokens: int = 1000  # tokens per /generate call
    max_text_chars: int = 2_000_000  # pasted training text (Tiny Shakespeare is 1.1M)
    max_prompt_chars: int = 10_000  # prompts and attention inputs
    max_upload_bytes: int = 40_000_000  # any upload: a max_params checkpoint is 32 MB
    max_attention_tokens: int = 256  # tokens shown in attention maps
    # head importance runs the model once per head: its tokens are cut to this many billion multiply-adds
    # (core.interventions.importance_macs; ~5 s of one core): GPT-2 gets ~16 tokens, a 6 x 8 x 256 model all 256
    max_importance_gmacs: float = 200.0
    # sessions (the policy is in playground/sessions.py)
    # the memory every session's model may take together (training_bytes: 16 bytes a parameter while it
    # trains); by default from the machine: half the memory free at start (PLAYGROUND_MODEL_MEMORY_BYTES)
    model_memory_bytes: int = field(default_factory=lambda: default_model_memory())
    max_trainings: int = 200  # trainings admitted at once (each holds a worker thread); more wait in the queue
    max_light_sessions: int = 1000  # sessions holding none (a visitor who has not trained yet)
    session_ttl_s: float = 3600.0  # a model in a tab open in a browser is freed after this idle
    api_ttl_s: float = 600.0  # a session with no browser (no heartbeat), or without a model, after this
    evict_idle_s: float = 600.0  # a model idle this long may make room for another learner's
    # ... or this long, when the state store keeps it (it comes back on the next click, unchanged): short, so a
    # room filling at two presses a second has room; not zero, so two learners clicking in turn do not swap
    set_aside_idle_s: float = 5.0
    # Gradio keeps its own state for every session hash it sees (about 0.8 MB each, with the last
    # outputs): past this many the least recently used goes, and the sweep drops idle ones. The app
    # keeps nothing there that matters (models live in the registry), so losing it costs nothing.
    gradio_state_capacity: int = 100  # beyond those training (`gradio_sessions`)
    # Trainings: every learner's runs at once (up to max_trainings), taking turns step by step
    # (core.schedule.FairShare); this many steps compute at a time, by default one per core.
    train_slots: int = field(default_factory=default_slots)
    # queue: how many of each other heavy event kind run at once; the rest wait in the queue
    generate_concurrency: int = 4
    attention_concurrency: int = 4
    baby_concurrency: int = 2
    checkpoint_concurrency: int = 1  # uploads and downloads one at a time: each briefly holds a model's bytes twice
    max_queue_size: int = 100
    # Whether the Train tab's trainings of models of the same shape step together, stacked (core.group): "auto"
    # on a GPU, where one small model's step leaves the device idle (4.7x at 60 learners, 6.1x at 1,000 on an
    # H200), not on CPU cores, where the stacked step is slower than the same steps one after another; "on"
    # everywhere, "off" nowhere (tests/bench/README.md)
    stack_steps: str = "auto"
    # Trainings that do not step stacked (stack_steps off, the Ladder's) on models under this many parameters
    # train on the CPU even where there is a GPU: alone, their steps are bound by kernel launches and Python,
    # and sixty default-task learners on one H200 got their first point later than on two CPU cores
    # (tests/bench/README.md, GPU hosts). Stacked trainings use the GPU at every size.
    gpu_min_params: int = 1_000_000
    # Trainings on the CPU step in worker processes of their own (core.workers) while two or more train: "auto"
    # one per core where there are two or more (sixty default-task learners' steps in threads of one process
    # waited for Python's one lock, leaving the cores a third idle), a number of processes, or "off". A lone
    # training steps in the server on every thread either way (tests/bench/README.md)
    step_workers: str = "auto"
    # On a ZeroGPU Space (playground.zerogpu), bigger models train in GPU calls of this many seconds each (each
    # asks for 20 s more, and the visitor's quota must hold what it asks for), this many at once; the learners
    # still training take turns chunk by chunk
    zero_gpu_chunk_s: float = 10.0
    zero_gpu_slots: int = 2
    # torch intra-op threads per process, see `playground.app.configure_torch`
    torch_threads: int = 1
    # The pretrained models of Generate and Attention (playground.pretrained.CATALOGUE), one field each:
    # a Hugging Face Hub repo id, downloaded on first use, or a local folder with config.json and
    # model.safetensors (and tokenizer.json for SmolLM2), for offline use. Set by whoever runs the server,
    # never by a client.
    gpt2_weights: str = "gpt2"
    smollm2_weights: str = "HuggingFaceTB/SmolLM2-135M"
    # GGUF models Generate and Attention may read too (playground.pretrained.gguf_kinds): a folder of .gguf files,
    # an Ollama models folder (~/.ollama/models: its models by name:tag), or one .gguf file; "" offers none. The
    # picker offers them by name: a request names one of these, never a path.
    gguf_dir: str = ""
    # The state store (playground.store): a folder or any fsspec URL several servers may share ("off":
    # models in memory only), and the most it may hold; least recently written models go first.
    state_dir: str = field(default_factory=lambda: default_state_dir(os.environ))
    state_budget_bytes: int = 2_000_000_000
    # Rooms (playground.rooms): a teacher's class view over the learners who joined through the room's link. A room
    # takes at most `room_max_learners` (a workshop of 150 and the stragglers), a server at most `max_rooms`, and
    # one ends after `room_idle_s` with no call from anyone in it. `teacher_key`, when set, is what opens a room and
    # every room's class view; else each room gets a new random key, shown once to the teacher who opened it.
    room_max_learners: int = 200
    max_rooms: int = 20
    room_idle_s: float = 4 * 3600.0
    teacher_key: str = field(default="", repr=False)  # a secret: never in a log line
    # True when the caps were lifted on purpose (a laptop), for messages only
    caps_lifted: bool = False

    # Fields that are caps: error messages tell how to lift them.
    CAPS = (
        "max_layers", "max_heads", "max_embd", "max_block_size", "max_batch_size", "max_params", "max_iters",
        "max_new_tokens", "max_text_chars", "max_prompt_chars", "max_upload_bytes", "max_attention_tokens",
        "max_importance_gmacs",
    )

    def __post_init__(self) -> None:
        for setting in dataclasses.fields(self):
            value = getattr(self, setting.name)
            if setting.type in ("int", "float") and not value > 0:
                raise ValueError(f"setting {setting.name} must be positive, got {value!r}")
        if self.stack_steps not in STACK_STEPS:
            raise ValueError(f"setting stack_steps must be one of {STACK_STEPS}, got {self.stack_steps!r}")
        if self.step_workers not in ("auto", "off") and not (self.step_workers.isdigit() and int(self.step_workers) > 0):
            raise ValueError(f"setting step_workers must be auto, off or a number of processes, got {self.step_workers!r}")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> "Settings":
        """Defaults, then `PLAYGROUND_<FIELD>` variables, then keyword overrides."""
        environ = os.environ if environ is None else environ
        values = {}
        for setting in dataclasses.fields(cls):
            raw = environ.get(ENV_PREFIX + setting.name.upper())
            if raw is None:
                continue
            try:
                values[setting.name] = _parse(setting.type, raw)
            except ValueError:
                raise ValueError(
                    f"{ENV_PREFIX}{setting.name.upper()}={raw!r} is not a valid {setting.type}"
                ) from None
        return cls(**{**values, **overrides})

    @classmethod
    def local(cls, environ: dict[str, str] | None = None, **overrides) -> "Settings":
        """Caps for one person on their own machine: bigger models, longer runs, fewer sessions."""
        lifted = dict(
            max_layers=24, max_heads=32, max_embd=1024, max_block_size=2048, max_batch_size=512,
            max_params=2_000_000_000,
            max_iters=1_000_000, max_new_tokens=10_000, max_text_chars=200_000_000,
            max_prompt_chars=200_000, max_upload_bytes=2_000_000_000, max_attention_tokens=512,
            max_importance_gmacs=100_000.0,
            # one training computes at a time, on every core (two tabs take turns)
            max_trainings=8, torch_threads=max(1, os.cpu_count() or 1), train_slots=1, caps_lifted=True,
            step_workers="off",
        )
        return cls.from_env(environ, **{**lifted, **overrides})

    @property
    def worker_processes(self) -> int:
        """How many step worker processes the `step_workers` setting asks for (0: none)."""
        if self.step_workers == "auto":
            cores = default_slots()
            return cores if cores >= 2 else 0
        return 0 if self.step_workers == "off" else int(self.step_workers)

    @property
    def train_concurrency(self) -> int:
        """Trainings admitted at once: more than a room's learners, so nobody waits in the queue to start."""
        return self.max_trainings

    @property
    def gradio_sessions(self) -> int:
        """Sessions whose state Gradio keeps: `gradio_state_capacity` plus one for each training admitted.
        A training's stream needs its state at every update; an evicted one is rebuilt each time (Gradio
        makes the config of every component of the app for it), and a room of 150 learners on a capacity
        of 100 spent its time rebuilding them: not one run finished in ten minutes (tests/bench/README.md)."""
        return self.gradio_state_capacity + self.train_concurrency

    def cap_hint(self, cap: str) -> str:
        """How a user lifts `cap`, appended to messages about values over it."""
        if cap not in self.CAPS:
            raise ValueError(f"{cap!r} is not a cap; caps are {self.CAPS}")
        return (
            f"This server's cap is {getattr(self, cap):,}; running locally, lift it with "
            f"`python -m playground --no-caps` or {ENV_PREFIX}{cap.upper()}=N."
        )


def default_model_memory() -> int:
    """Half the memory this machine has free now (Linux's MemAvailable; else half of it all), at least 512 MiB."""
    available = None
    try:
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        try:
            available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            pass
    return max(512 << 20, (available or 0) // 2)


def default_state_dir(environ) -> str:
    """Where models are kept between restarts: a Space's persistent storage (/data) when it has one,
    else the user's cache folder."""
    if environ.get("SPACE_ID") and os.path.isdir("/data") and os.access("/data", os.W_OK):
        return "/data/attention-playground/state"
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "attention-playground", "state")


def _parse(kind: str, raw: str):
    if kind == "bool":
        if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
            raise ValueError(raw)
        return raw.lower() in ("1", "true", "yes")
    if kind == "str":
        return raw
    return int(raw) if kind == "int" else float(raw)
