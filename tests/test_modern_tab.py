"""Today's parts on the Train tab (issue 22): the Modern parts group trains them, presets and checkpoints
fill it, a change of part is a new model, and the attention maps show what each part does."""

from core.checkpoint import save_archive
from core.config import GPTConfig
from core.model import GPT
from core.tokenizers import CharTokenizer
from playground.tabs.train.form import MODERN, TrainForm, described_parts
from support.app import FORM
from support.handlers import run_train

LLAMA_PARTS = dict(position="rope", norm="rmsnorm", activation="swiglu", n_kv_head=1, window=6)


def test_training_with_todays_parts_builds_them(train, ctx):
    updates = run_train(train, **LLAMA_PARTS)
    assert updates[-1][0].startswith("Done: 20 steps")
    config = ctx.registry.get("a").model.config
    assert (config.position, config.norm, config.activation, config.n_kv_head, config.window) == \
        ("rope", "rmsnorm", "swiglu", 1, 6)
    assert ctx.registry.get("a").model.position_embedding is None  # RoPE needs no table of positions
    count, next_step = train.run.preview(**{**FORM, **LLAMA_PARTS, "steps": 40}, request="a")
    assert "position embedding" not in count and "continues your model" in next_step
    assert "RMSNorms" in count and "LayerNorms" not in count
    _, next_step = train.run.preview(**{**FORM, **LLAMA_PARTS, "window": 0, "steps": 40}, request="a")
    assert "window 6 → off" in next_step and "New model" in next_step  # another part: another model


def test_as_many_key_value_heads_as_query_heads_is_plain_attention(train):
    recipe = train.rules.recipe(TrainForm(**{**FORM, "n_kv_head": FORM["n_head"]}))
    assert recipe.model["n_kv_head"] is None
    assert recipe.configs(28)[0].kv_heads == FORM["n_head"]


def test_the_llama_style_preset_fills_the_modern_parts(train):
    form = train.rules.apply_preset("llama-style")
    assert {name: form[name] for name in MODERN} == dict(position="rope", norm="rmsnorm", activation="swiglu",
                                                          n_kv_head=2, window=0)
    assert {name: train.rules.apply_preset("shakespeare-char-cpu")[name] for name in MODERN} == dict(
        position="learned", norm="layernorm", activation="gelu", n_kv_head=0, window=0)
    count, _ = train.run.preview(**{**FORM, **{k: v for k, v in form.items() if k in FORM}}, request="p")
    assert "parameters" in count and "position embedding" not in count


def test_a_loaded_checkpoint_shows_its_parts(train, ctx, tmp_path):
    config = GPTConfig(vocab_size=28, block_size=16, n_layer=1, n_head=2, n_embd=16, **LLAMA_PARTS)
    path = save_archive(tmp_path / "modern.zip", GPT(config), CharTokenizer("abcdefghijklmnopqrstuvwxyz|\n"))
    shown = train.checkpoints.load_checkpoint(str(path), "m")
    assert {name: shown[name] for name in MODERN} == LLAMA_PARTS


def test_step_by_step_shows_ropes_turn_and_alibis_penalty(train, ctx):
    from playground.tabs.attention import AttentionHandlers

    attention = AttentionHandlers(ctx)
    run_train(train, "rope", position="rope")
    attention.analysis.analyse("abcdefgh|abcdefgh", "rope")
    note, table, vectors = attention.steps.head_steps(0, 0, 6, False, False, "rope")
    assert "Rotary positions (RoPE)" in note and "ALiBi" not in note
    titles = [a.text for a in vectors.layout.annotations]
    assert any("before RoPE" in t for t in titles) and any("turned by their positions" in t for t in titles)
    assert "+ mask" in list(table.data[0].x)

    run_train(train, "alibi", position="alibi", window=4)
    attention.analysis.analyse("abcdefgh|abcdefgh", "alibi")
    note, table, vectors = attention.steps.head_steps(0, 1, 6, False, False, "alibi")
    assert "**ALiBi:**" in note and "slope m = " in note and "Sliding window:** the 3 earliest" in note
    assert list(table.data[0].x)[2:4] == ["ALiBi −m·dist", "+ ALiBi, mask"]
    assert not any("before RoPE" in a.text for a in vectors.layout.annotations)


def test_computed_positions_read_past_the_trained_length_and_the_status_says_what_happens(train, ctx):
    from playground.tabs.attention import AttentionHandlers

    attention, text = AttentionHandlers(ctx), "abcdefgh|abcdefgh\nabcdefgh|abcdefgh"  # 35 tokens; context 16
    for session, parts, expected in (("r", dict(position="rope"), "RoPE turns them by angles"),
                                     ("l", dict(position="alibi"), "ALiBi was made"),
                                     ("w", dict(position="rope", window=6), "still see only the last 6 keys"),
                                     ("n", dict(use_position_embedding=False), "only the mask orders the tokens"),
                                     ("nm", dict(use_position_embedding=False, causal=False),
                                      "neither positions nor a causal mask, so nothing orders the tokens")):
        run_train(train, session, **parts)
        status, *_ = attention.analysis.analyse(text, session)
        assert "**35 tokens**" in status and "Kept the first" not in status
        assert "Past its training length:** this model trained on 16 tokens at a time; tokens 16 to 34" in status
        assert expected in status
        assert ctx.registry.get(session).attention.maps.shape[-1] == 35
        note, *_ = attention.steps.head_steps(0, 0, 34, False, False, session)  # the other tools read it too
        assert "query" in note
    run_train(train, "learned")
    status, *_ = attention.analysis.analyse(text, "learned")
    assert "Kept the first 16 of the text's 35 tokens" in status and "Past its training length" not in status


def test_the_stage_and_the_position_switch_name_the_parts_the_model_is_built_with():
    """A Llama-style model's stage read "+ residual connections and LayerNorm" and its switch "Position
    embeddings", ticked, though it has RMSNorm and no position table."""
    def shown(norm, position):
        stage, switch = described_parts(norm, position)
        return dict((name, label) for label, name in stage["choices"])["gpt"], switch["label"]

    assert shown("layernorm", "learned") == (
        "6. + residual connections and LayerNorm: the full GPT: blocks stack, and deeper trains better.",
        "Position embeddings")
    stage, switch = shown("rmsnorm", "rope")
    assert "RMSNorm" in stage and "LayerNorm" not in stage
    assert switch == "Positions: RoPE (Llama), no position table"
    assert shown("layernorm", "alibi")[1] == "Positions: ALiBi, no position table"
