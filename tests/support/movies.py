"""Attention maps made by hand for the movie's tests: causal uniform ones, and one head that does induction on PROBE.

Never imports a test module.
"""

import torch

PROBE = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9]  # a repeat: induction targets exist from position 5 on
L, H, T = 2, 3, len(PROBE)


def uniform() -> torch.Tensor:
    """(L, H, T, T) causal uniform attention."""
    rows = torch.ones(T, T).tril()
    return (rows / rows.sum(-1, keepdim=True)).expand(L, H, T, T).clone()


def with_induction_head(layer: int = 1, head: int = 2) -> torch.Tensor:
    """Uniform maps except one head that looks at the token after the earlier copy."""
    maps = uniform()
    maps[layer, head] = 0
    for q in range(T):
        maps[layer, head, q, q - 4 if q >= 5 else q] = 1.0  # PROBE[q - 5] == PROBE[q]: the key after it is q - 4
    return maps
