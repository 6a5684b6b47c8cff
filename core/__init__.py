"""Attention Playground's GPT package: model, tokenizers, data, training, sampling, analysis.

    from core import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=65, block_size=64))
    logits, loss, attentions = model(idx, return_attention=True)

Never imports gradio, plotly or `playground`: core is the UI-free package, usable from a notebook.
"""

from core.config import STAGES, GPTConfig, stage_config
from core.model import GPT, capture_attention

__all__ = ["GPT", "GPTConfig", "STAGES", "stage_config", "capture_attention"]
