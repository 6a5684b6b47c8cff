"""Stepping together: trainers of models of the same shape take one stacked optimizer step per tick.

    group = StepGroup()
    trainer = Trainer(model, data, config, update=group.update, observers=[group.member(), *standard(config)])
    for event in trainer.run(): ...     # each in its own thread, as the app runs them

Each member keeps its own Trainer loop (batches, schedule position, guard, evaluations, Stop and
continue); only the optimizer step is shared. A member's `update` hands its batch and learning rate to
the group and blocks until a tick has stepped it. A tick fires when every member that is running has
arrived (or `max_wait` seconds after the first arrival, so a member busy elsewhere, say evaluating or
streaming, delays the others at most that long) and takes whoever is waiting: members join when their
run starts and leave when it ends (the `member()` observer), so a stopped or finished member never
holds the others, and a lone member steps at once (with the plain `gradient_step`: the same step).

One tick: the waiting members' parameters and AdamW moments are stacked (`torch.stack`, by model
shape), `vmap(grad_and_value(...))` over `functional_call` gives each model its loss and gradient on its
own batch, each gradient is clipped to its own norm bound, and AdamW's update (torch.optim.AdamW's
math: decoupled decay on matrices only, bias corrections from each parameter's own step count, each
member's own learning rate, betas, decay and eps) runs elementwise on the stacks. The results are
copied back into each member's model and `trainer.optimizer.state`.

Why copy in and out each tick instead of keeping the stacks as the parameters' storage: each member's
model and optimizer stay the source of truth, so everything that reads or replaces them (state_dict,
checkpoints, load_state_dict, the divergence guard's restore and optimizer reset, evaluation, samples,
attention probes) works unchanged, and membership can change on any tick. The copies cost two passes
over the weights and moments per tick; stacks as storage (parameters as views) would save them where
that matters (a large room on a GPU).

Where it pays (tests/bench/bench_group.py): not on two CPU cores, where the stacked round of the
default task's model takes 1.3-1.5x as long as the same steps one after another (the batched matmuls
are no faster there, and the stacking adds copies); on a GPU, where one small model's step leaves the
device idle: 4.7x at 60 models and 6.1x at 1,000 on an H200, bounded by the copies in and out, whose
per-member bookkeeping takes ten times the GPU's own time at 1,000 (tests/bench/README.md).

Not grouped (they step alone, with `Trainer.gradient_step`, and never count as members): dropout > 0
(a stacked step cannot draw each model's private dropout stream as a lone step does), gradient
accumulation, several processes (DDP) and `compile`.

Never imports gradio, plotly or `playground`.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.func import functional_call, grad_and_value, vmap

from core.train import Observer, Trainer


def groupable(trainer: Trainer) -> bool:
    """Whether a stacked step gives this trainer exactly its lone step (see the module docstring)."""
    return (trainer.model.config.dropout == 0 and trainer.accumulation_steps == 1
            and not trainer.processes.distributed and not trainer.config.compile)


@dataclass(eq=False)  # compared by identity
class _Request:
    trainer: Trainer
    x: torch.Tensor
    y: torch.Tensor
    lr: float
    taken: bool = False  # by a tick (under the group's lock)
    done: threading.Event = field(default_factory=threading.Event)
    result: tuple[float, float] | None = None
    error: BaseException | None = None


class StepGroup:
    """Trainers stepping together; `update` is each member's Trainer `update=` (see the module docstring)."""

    def __init__(self, max_wait: float = 0.1) -> None:
        self.max_wait = max_wait
        self._members: Counter[Trainer] = Counter()  # running trainers (a count: a run inside a run is harmless)
        self._waiting: dict[Trainer, _Request] = {}
        self._lock = threading.Condition()
        self.tick_sizes: Counter[int] = Counter()  # how many members each tick stepped: size -> ticks
        self.timeouts = 0  # ticks fired by max_wait rather than by everyone arriving

    # ------------------------------------------------------------------ membership

    def member(self) -> Observer:
        """The observer that makes a trainer a member while it runs (join at run start, leave at its end)."""
        return _Membership(self)

    @contextlib.contextmanager
    def joined(self, trainer: Trainer) -> Iterator[None]:
        """`trainer` counts as a member inside the block (a trainer that cannot be grouped never does)."""
        if not groupable(trainer):
            yield
            return
        with self._lock:
            self._members[trainer] += 1
        try:
            yield
        finally:
            with self._lock:
                self._members[trainer] -= 1
                if not self._members[trainer]:
                    del self._members[trainer]
                self._lock.notify_all()  # those waiting for it may be complete now

    @property
    def members(self) -> int:
        """How many trainers are members now."""
        with self._lock:
            return len(self._members)

    # ------------------------------------------------------------------ the update

    def update(self, trainer: Trainer, x: torch.Tensor, y: torch.Tensor, lr: float) -> tuple[float, float]:
        """A member's Trainer `update`: its step, taken in the group's next tick (returns loss, gradient norm)."""
        if not groupable(trainer):
            return Trainer.gradient_step(trainer, x, y, lr)
        request, tick = _Request(trainer, x, y, lr), None
        with self._lock:
            self._waiting[trainer] = request
            deadline = time.monotonic() + self.max_wait
            while not request.taken:  # else another thread's tick steps it
                if self._everyone_arrived():  # the last to arrive fires the tick, no thread woken for it
                    tick = self._take()
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    self.timeouts += 1
                    tick = self._take()
                    break
                self._lock.wait(left)
        if tick is not None:
            self._step(tick)
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def _everyone_arrived(self) -> bool:
        return self._members.keys() <= self._waiting.keys()

    def _take(self) -> list[_Request]:
        tick, self._waiting = list(self._waiting.values()), {}
        for request in tick:
            request.taken = True
        self.tick_sizes[len(tick)] += 1
        self._lock.notify_all()  # the others stop waiting for arrivals and wait for their results
        return tick

    def _step(self, tick: list[_Request]) -> None:
        """Step every request of a tick, one stack per model and batch shape; each gets its result or the error."""
        shapes: dict[tuple, list[_Request]] = {}
        for request in tick:  # a batch of another size is another stack too
            shapes.setdefault((_shape(request.trainer), request.x.shape), []).append(request)
        for requests in shapes.values():
            try:
                steps = [(r.trainer, r.x, r.y, r.lr) for r in requests]
                # alone, the plain step is the same step, without vmap's overhead (half the time on a CPU)
                results = stacked_step(steps) if len(steps) > 1 else [Trainer.gradient_step(*steps[0])]
                for request, result in zip(requests, results):
                    request.result = result
            except BaseException as error:  # every member of the stack sees it, in its own thread
                for request in requests:
                    request.error = error
            finally:
                for request in requests:
                    request.done.set()


class _Membership(Observer):
    def __init__(self, group: StepGroup) -> None:
        self.group = group

    def running(self, trainer: Trainer) -> contextlib.AbstractContextManager:
        return self.group.joined(trainer)


def _shape(trainer: Trainer) -> tuple:
    """What must match for models to share a stack: the model's config (its shape and its forward pass),
    the device and the precision."""
    return repr(trainer.model.config), str(trainer.device), trainer._amp_dtype


# ---------------------------------------------------------------------- the stacked step


def stacked_step(steps: list[tuple[Trainer, torch.Tensor, torch.Tensor, float]]) -> list[tuple[float, float]]:
    """One AdamW step for each (trainer, inputs, targets, learning rate), all of one model shape, computed
    stacked; each trainer's model and optimizer state end as its `gradient_step` would leave them.
    Returns each one's (loss, gradient norm before clipping), in one host sync."""
    trainers = [trainer for trainer, *_ in steps]
    names = [name for name, _ in trainers[0].model.named_parameters()]
    params = [list(t.model.parameters()) for t in trainers]  # member-major, in `names` order
    stacked = {name: torch.stack([p[i].detach() for p in params]) for i, name in enumerate(names)}
    buffers = {name: b for name, b in trainers[0].model.named_buffers()}  # constants (masks), shared
    x = torch.stack([x for _, x, _, _ in steps])
    y = torch.stack([y for _, _, y, _ in steps])

    template = trainers[0].model  # blocked in its update, like every member of the tick

    def loss_of(weights: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return functional_call(template, (weights, buffers), (xs, ys))[1].float()

    for trainer in trainers:
        trainer.model.train()  # as gradient_step leaves each model
    with torch.enable_grad(), trainers[0].autocast(), template.explicit_attention():  # SDPA has no vmap rule on CPU
        grads, losses = vmap(grad_and_value(loss_of))(stacked, x, y)

    norms = _clip(list(grads.values()), [t.config.grad_clip for t in trainers])
    _adamw(trainers, names, params, stacked, grads, [lr for *_, lr in steps])
    return [tuple(pair) for pair in torch.stack([losses, norms], dim=1).tolist()]


def _per_member(values: list[float], like: torch.Tensor) -> torch.Tensor:
    """(N,) scalars as a float64 tensor on the stacks' device."""
    return torch.tensor(values, dtype=torch.float64, device=like.device)


def _expand(scalars: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(N,) -> (N, 1, ...) to broadcast over a stacked tensor, in its dtype."""
    return scalars.to(like.dtype).view(-1, *[1] * (like.dim() - 1))


def _clip(grads: list[torch.Tensor], bounds: list[float]) -> torch.Tensor:
    """Scale each member's gradients to at most its bound (0: none), as `clip_grad_norm_` does; returns the
    (N,) norms before clipping."""
    per_tensor = torch.stack([g.flatten(1).norm(dim=1) for g in grads])  # (tensors, N)
    norms = per_tensor.norm(dim=0)  # (N,): each member's total norm
    limit = _per_member([bound or math.inf for bound in bounds], norms).to(norms.dtype)
    scale = (limit / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(_expand(scale, g))
    return norms


def _adamw(trainers: list[Trainer], names: list[str], params: list[list[torch.Tensor]],
           stacked: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], lrs: list[float]) -> None:
    """torch.optim.AdamW's update on the stacks, then each member's weights and moments written back."""
    groups = [{id(p): g for g in t.optimizer.param_groups for p in g["params"]} for t in trainers]
    for i, name in enumerate(names):
        p, g = stacked[name], grads[name]
        members = [params[m][i] for m in range(len(trainers))]
        settings = [groups[m][id(members[m])] for m in range(len(trainers))]
        states = [t.optimizer.state[member] for t, member in zip(trainers, members)]
        for state, member in zip(states, members):
            if not state:  # a first step, or after the divergence guard reset the optimizer
                state["step"] = torch.zeros((), dtype=torch.float32, device=member.device)
                state["exp_avg"] = torch.zeros_like(member, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(member, memory_format=torch.preserve_format)
        torch._foreach_add_([state["step"] for state in states], 1)  # one kernel, not one per member
        step = torch.stack([s["step"] for s in states]).double()
        beta1 = _per_member([s["betas"][0] for s in settings], p)
        beta2 = _per_member([s["betas"][1] for s in settings], p)
        lr = _per_member(lrs, p)
        decay = _per_member([s["weight_decay"] for s in settings], p)
        eps = _per_member([s["eps"] for s in settings], p)
        exp_avg = torch.stack([s["exp_avg"] for s in states])
        exp_avg_sq = torch.stack([s["exp_avg_sq"] for s in states])

        p.mul_(_expand(1 - lr * decay, p))  # decoupled weight decay (0 for vectors: their group's)
        exp_avg.lerp_(g, _expand(1 - beta1, p))
        exp_avg_sq.mul_(_expand(beta2, p)).addcmul_(g, g * _expand(1 - beta2, p))
        step_size = lr / (1 - beta1**step)  # bias corrections in double precision, as the fused kernel's
        denom = (exp_avg_sq.sqrt() / _expand((1 - beta2**step).sqrt(), p)).add_(_expand(eps, p))
        p.sub_(exp_avg / denom * _expand(step_size, p))

        with torch.no_grad():
            torch._foreach_copy_(members, list(p.unbind()))
            torch._foreach_copy_([s["exp_avg"] for s in states], list(exp_avg.unbind()))
            torch._foreach_copy_([s["exp_avg_sq"] for s in states], list(exp_avg_sq.unbind()))
    for trainer, lr in zip(trainers, lrs):
        for group in trainer.optimizer.param_groups:
            group["lr"] = lr  # as gradient_step leaves it, so state_dict() matches a lone run's
