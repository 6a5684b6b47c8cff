"""Tiny pretrained models saved as transformers saves them, offline: a random GPT-2 and a random Llama with a word tokenizer.

Never imports a test module.
"""

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

WORDS = "the quick brown fox jumps over lazy dog and then a hobbit lived in hole ground".split()
PRETRAINED_TEXT = "The quick brown fox jumps over the lazy dog, and the quick brown fox"  # what the app's tests read


def save_tiny_gpt2(folder) -> str:
    """A random GPT-2 with GPT-2's vocabulary: 2 layers x 4 heads, 32 channels, context 64."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50257, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return str(folder)


def tiny_llama(seed: int = 0, **overrides) -> transformers.LlamaForCausalLM:
    """2 layers, 4 query heads sharing 2 key/value heads, 64 channels; every weight redrawn large (the
    norms' around 1), so that no mapping mistake hides in near-zero weights."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=len(WORDS) + 1, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, **overrides)
    model = transformers.LlamaForCausalLM(config).eval()
    model.set_attn_implementation("eager")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if "norm" in name else 0.0))
    return model


def word_tokenizer() -> Tokenizer:
    """A word-level tokenizer.json of WORDS (and [UNK]), built with Hugging Face `tokenizers`."""
    tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(["[UNK]", *WORDS])}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def saved(model: transformers.LlamaForCausalLM, folder) -> str:
    model.save_pretrained(folder)  # model.safetensors and config.json
    word_tokenizer().save(str(folder / "tokenizer.json"))
    return str(folder)
