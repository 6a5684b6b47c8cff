"""The pretrained GPT-2 in the app: load time, memory of the shared copy and of each session's view,
the Attention tab's analysis of all 144 heads, and generation speed.

    .venv/bin/python tests/bench/bench_pretrained.py [FOLDER]

FOLDER holds config.json and model.safetensors of a GPT-2 (e.g. from `huggingface-cli download gpt2
config.json model.safetensors --local-dir FOLDER`). Without it, a random-weights GPT-2 small (124M,
GPT2Config's defaults; ~500 MB) is built with transformers into a temporary folder: trained weights
cost the same time. Nothing is downloaded.
"""

from __future__ import annotations

import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import gradio as gr  # noqa: E402

from core.sample import stream  # noqa: E402
from playground.context import AppContext  # noqa: E402
from playground.model_picker import ModelPicker  # noqa: E402
from playground.sessions import SessionRegistry  # noqa: E402
from playground.settings import Settings  # noqa: E402
from playground.tabs.attention import AttentionHandlers  # noqa: E402

TOKENS = 128  # the analysis: every head at 128 tokens
RUNS = 5
NEW_TOKENS = 64
TEXT = ("In the beginning the Universe was created. This has made a lot of people very angry and been widely "
        "regarded as a bad move. Many races believe that it was created by some sort of god, though the "
        "Jatravartid people of Viltvodle VI believe that the entire Universe was in fact sneezed out of the "
        "nose of a being called the Great Green Arkleseizure. ") * 3


def rss_mb() -> float:
    """This process's resident memory now, in MB (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e6


def random_gpt2(folder: Path) -> None:
    import transformers  # only to write the files, as save_pretrained writes them

    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config()).save_pretrained(folder)


def main() -> None:
    folder = sys.argv[1] if len(sys.argv) > 1 else None
    scratch = None
    if folder is None:
        scratch = tempfile.TemporaryDirectory(prefix="gpt2-random-")
        print(f"building a random-weights GPT-2 small in {scratch.name} ...")
        random_gpt2(Path(scratch.name))
        folder = scratch.name
        gc.collect()
    settings = Settings(gpt2_weights=folder)
    torch.set_num_threads(settings.torch_threads)
    with gr.Blocks():
        ctx = AppContext(settings=settings, registry=SessionRegistry(10**9, 3600.0), model_changed=gr.Textbox(),
                         tabs=gr.Tabs())
    picker, attention = ModelPicker(ctx), AttentionHandlers(ctx)

    before = rss_mb()
    start = time.perf_counter()
    gpt2 = ctx.pretrained["gpt2"].get()
    print(f"load (cold, {folder}): {time.perf_counter() - start:.2f} s")
    loaded = rss_mb()
    print(f"RSS of the shared copy: +{loaded - before:.0f} MB "
          f"({gpt2.model.parameter_counts()['total']:,} parameters, float32)")
    picker.use_model("gpt2", "alice")
    after_one = rss_mb()
    picker.use_model("gpt2", "bob")
    after_two = rss_mb()
    print(f"RSS of each session's view: +{after_one - loaded:.1f} MB (first), +{after_two - after_one:.1f} MB (second)")

    ids = gpt2.tokenizer.encode(TEXT)[:TOKENS]
    text = gpt2.tokenizer.decode(ids)
    config = gpt2.model.config
    for threads in (1, 2):
        torch.set_num_threads(threads)
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            outputs = attention.analysis.analyse(text, "alice")
            payload = sum(len(out.to_json()) for out in outputs if hasattr(out, "to_json"))  # as Gradio sends them
            times.append(time.perf_counter() - start)
        print(f"Attention analyse, {config.n_layer * config.n_head} heads at {len(ids)} tokens, {threads} thread(s): "
              f"median {statistics.median(times):.2f} s of {RUNS} (min {min(times):.2f}), figures {payload / 1e6:.2f} MB JSON")

    # The inside tools on the last analysis, at the server's one thread: importance is cut to the budget.
    torch.set_num_threads(settings.torch_threads)
    for name, tool in (("head importance (every head off alone)",
                        lambda: attention.knockouts.importance("zero", "alice")),
                       ("logit lens", lambda: attention.lens.lens(5, "alice"))):
        start = time.perf_counter()
        tool()
        print(f"{name}, 1 thread: {time.perf_counter() - start:.2f} s")
    print(f"  importance's loss over the first {ctx.registry.get('alice').attention.results['importance_tokens']} "
          f"tokens (max_importance_gmacs={settings.max_importance_gmacs:g})")

    session = ctx.registry.get("alice")
    prompt = gpt2.tokenizer.encode("The meaning of life is")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        start = time.perf_counter()
        steps = list(stream(session.reading.model, gpt2.tokenizer, prompt, max_new_tokens=NEW_TOKENS,
                            temperature=0.8, generator=torch.Generator().manual_seed(0), n_alternatives=8))
        seconds = time.perf_counter() - start
        print(f"generation, {threads} thread(s): {len(steps) / seconds:.1f} tokens/s ({len(steps)} tokens, KV cache)")
    if scratch is not None:
        scratch.cleanup()


if __name__ == "__main__":
    main()
