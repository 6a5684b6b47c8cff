"""The Train tab: pick a corpus, tokenizer and model, train live, stop, continue, replay the attention,
compare runs, save and load; its address can set it up (the teacher's link).

A package of one module per part (see `layout`, which lays them out and wires them). The app
builds the tab with `build(ctx)`; tests and benchmarks call the handlers of `TrainHandlers(ctx)`'s
parts (`.run.train`, `.replay.play`, `.checkpoints.load_checkpoint`, ...).
Never imports another tab.
"""

from playground.tabs.train.layout import TrainHandlers, build

__all__ = ["TrainHandlers", "build"]
