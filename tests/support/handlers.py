"""The tabs' handlers called as plain functions: an app context without a server, a tiny run, a model handed to a session.

A session id stands in for gr.Request. The Train and Generate tests share `make_ctx` (small caps, no
components); the Attention tab's tests `make_attention_ctx` (its components built in a gr.Blocks).
Never imports a test module.
"""

import gradio as gr

from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import CharTokenizer
from playground.context import AppContext
from playground.sessions import SessionRegistry, TrainedModel
from playground.settings import Settings

from .app import FORM

SETTINGS = Settings(max_layers=3, max_heads=4, max_embd=64, max_block_size=32, max_batch_size=16,
                    max_params=200_000, max_iters=2000, max_new_tokens=100, max_prompt_chars=200)
VOCAB = "\n abcdefghijklmnopqrstuvwxyz|"  # the Attention tests' character vocabulary


def make_ctx() -> AppContext:
    """The Train and Generate tabs' context: SETTINGS' caps, no components."""
    return AppContext(settings=SETTINGS, registry=SessionRegistry(10**9, 600), model_changed=None, tabs=None)


def run_train(train, session="a", **changes):
    """All the updates of one /train call of FORM with `changes`: (status, progress, loss figure, sample,
    attention, model_changed, movie note, head scores, what Train will do)."""
    return list(train.run.train(**{**FORM, **changes}, request=session))


def make_attention_ctx(**settings) -> AppContext:
    """The Attention tab's context: `settings` over the defaults, its components built."""
    with gr.Blocks():
        return AppContext(settings=Settings(**settings), registry=SessionRegistry(10**9, 3600.0),
                          model_changed=gr.Textbox(), tabs=gr.Tabs())


def give_model(ctx: AppContext, session_id="alice", tokenizer=None, **fields):
    """Session `session_id` with an untrained GPT (2 layers x 3 heads, 24 channels; `fields` change it)."""
    session = ctx.registry.get(session_id)
    tokenizer = tokenizer or CharTokenizer(VOCAB)
    config = dict(vocab_size=tokenizer.vocab_size, block_size=16, n_layer=2, n_head=3, n_embd=24)
    session.trained = TrainedModel(GPT(GPTConfig(**{**config, **fields})), tokenizer, "a test corpus")
    return session
