"""What training in ZeroGPU's chunks (playground.zerogpu) costs beside training in one go, on this CPU.

    .venv/bin/python tests/bench/bench_zerogpu.py [--calls 5] [--chunk-s 10]

For models of the sizes that go to the GPU on a ZeroGPU Space (a million parameters and up, to the
Shakespeare preset as a public server caps it), trained on Tiny Shakespeare:
1. the bytes one GPU call sends (the Chunk: weights, AdamW's moments, random states and the data) and
   those that come back (an update with the weights; one with the whole state at evaluations and at the
   chunk's end), and the time this host takes to pickle and unpickle each;
2. one call's round trip through the tests' stand-in for `spaces` (a worker forked, the chunk pickled
   across, one step trained there, the updates pickled back) against that step trained in the server's
   own process: what a call costs beyond its steps. ZeroGPU's own scheduling, CUDA's start in a fresh
   worker and the copies to and from the GPU are not here (no ZeroGPU to measure them on);
3. that cost as a share of a chunk of `--chunk-s` seconds.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fake_spaces"))  # the stand-in for Hugging Face's `spaces`
os.environ["SPACES_ZERO_GPU"] = "true"
from host import describe_host  # noqa: E402

from core.config import GPTConfig, TrainConfig  # noqa: E402
from core.data import TokenData, load_shakespeare  # noqa: E402
from core.model import GPT  # noqa: E402
from core.schedule import FairShare  # noqa: E402
from core.tokenizers import CharTokenizer  # noqa: E402
from core.train import Trainer  # noqa: E402
from playground.zerogpu import Chunk, Update, ZeroGPU, run, train_chunk, zero_gpu  # noqa: E402

# (label, model): the smallest that goes to the GPU, and the Shakespeare preset as a public server caps it
MODELS = {
    "1M (4 layers x 144)": dict(n_layer=4, n_head=4, n_embd=144, block_size=128),
    "Shakespeare preset, public caps (6 x 252)": dict(n_layer=6, n_head=6, n_embd=252, block_size=256),
}


def round_trip_s(value) -> tuple[int, float]:
    """(pickled bytes, seconds to pickle and unpickle), the best of three."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        data = pickle.dumps(value)
        pickle.loads(data)
        times.append(time.perf_counter() - started)
    return len(data), min(times)


def trainer_for(fields: dict, data: TokenData, vocab_size: int) -> tuple[GPT, TrainConfig]:
    model = GPT(GPTConfig(vocab_size=vocab_size, dropout=0.0, **fields), generator=torch.Generator().manual_seed(0))
    return model, TrainConfig(max_iters=1000, batch_size=16, eval_interval=1000, eval_iters=2, device="cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="GPU calls (one step each) timed per model")
    parser.add_argument("--chunk-s", type=float, default=10.0, help="the chunk length to price the calls against")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the app runs
    print(describe_host())
    text = load_shakespeare()
    tokenizer = CharTokenizer.from_text(text)
    gpu = zero_gpu(args.chunk_s)
    assert gpu is not None and gpu is not train_chunk, "the stand-in for spaces was not found"
    import spaces  # the stand-in: its calls record each worker's pid

    for label, fields in MODELS.items():
        data = TokenData.from_text(text, tokenizer, fields["block_size"])
        model, config = trainer_for(fields, data, tokenizer.vocab_size)
        n_params = sum(p.numel() for p in model.parameters())
        plain = Trainer(model, data, config)
        list(plain.run(2))  # AdamW's moments exist from the first step
        weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        chunk = Chunk(model.config, weights, config, plain.state_dict(), data, 1000, args.chunk_s)
        sent_bytes, sent_s = round_trip_s(chunk)
        event = next(iter(Trainer(GPT(model.config), data, config).run(1)))
        light_bytes, light_s = round_trip_s(Update(event, [], weights))
        whole_bytes, whole_s = round_trip_s(Update(event, [], weights, plain.state_dict()))
        print(f"\n{label}: {n_params:,} parameters, data {data.train.numel() + data.val.numel():,} tokens")
        print(f"  a call sends {sent_bytes / 1e6:.1f} MB ({sent_s * 1e3:.0f} ms to pickle and unpickle); updates "
              f"come back with the weights {light_bytes / 1e6:.1f} MB ({light_s * 1e3:.0f} ms), with the whole state "
              f"{whole_bytes / 1e6:.1f} MB ({whole_s * 1e3:.0f} ms)")

        steps_s = []
        for _ in range(args.calls):  # one step in this process
            started = time.perf_counter()
            list(plain.run(plain.step + 1))
            steps_s.append(time.perf_counter() - started)
        route = ZeroGPU(data, config, gpu=gpu, turns=FairShare(1), chunk_s=0.0)
        chunked = Trainer(model, data, config, observers=[route])
        chunked.load_state_dict(plain.state_dict())
        calls_s, before = [], len(spaces.calls)
        for _ in range(args.calls):  # one step in a GPU call: a worker forked, the chunk there and back
            started = time.perf_counter()
            list(run(chunked, chunked.step + 1))
            calls_s.append(time.perf_counter() - started)
        assert len(spaces.calls) - before == args.calls and route.refusal is None
        step, call = statistics.median(steps_s), statistics.median(calls_s)
        print(f"  one step here {step * 1e3:.0f} ms; one step in a GPU call {call * 1e3:.0f} ms (median of {args.calls}): "
              f"a call costs {max(0.0, call - step) * 1e3:.0f} ms beyond its steps, "
              f"{max(0.0, call - step) / args.chunk_s:.1%} of a {args.chunk_s:g}-s chunk")


if __name__ == "__main__":
    main()
