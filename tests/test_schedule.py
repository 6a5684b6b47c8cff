"""Fair turns (core.schedule.FairShare) and trainings that share them."""

import threading
import time

import pytest
import torch

from core.config import GPTConfig
from core.data import TokenData
from core.model import GPT
from core.schedule import FairShare, default_slots
from core.tokenizers import CharTokenizer
from core.config import TrainConfig
from core.observers import Timing, standard
from core.train import Trainer

TEXT = "the quick brown fox jumps over the lazy dog. " * 40


def test_turns_go_round_robin_between_owners():
    share, order, lock = FairShare(1), [], threading.Lock()
    start = threading.Barrier(3)

    def work(owner: str) -> None:
        start.wait()
        for _ in range(12):
            with share.turn(owner) as granted:
                assert granted
                with lock:
                    order.append(owner)
                time.sleep(0.005)  # longer than a thread takes to ask again

    threads = [threading.Thread(target=work, args=(name,)) for name in "abc"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(order) == 36
    # once all three wait, every three consecutive turns serve all three owners
    steady = order[3:-3]
    assert all(len(set(steady[i:i + 3])) == 3 for i in range(len(steady) - 2)), order


def test_slots_bound_how_many_hold_a_turn_at_once():
    share, holding, most, lock = FairShare(2), [0], [0], threading.Lock()

    def work(owner: int) -> None:
        for _ in range(5):
            with share.turn(owner):
                with lock:
                    holding[0] += 1
                    most[0] = max(most[0], holding[0])
                time.sleep(0.003)
                with lock:
                    holding[0] -= 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert most[0] == 2


def test_a_withdrawn_owner_stops_waiting_at_once():
    share, answers = FairShare(1), []
    with share.turn("holder"):
        waiting = threading.Thread(target=lambda: answers.append(share.turn("learner").__enter__()))
        waiting.start()
        time.sleep(0.05)
        assert waiting.is_alive()  # it waits for the holder's turn
        share.withdraw("learner")
        waiting.join(timeout=2)
        assert answers == [False]
    with share.turn("next") as granted:  # the permit was never lost
        assert granted


def test_members_are_counted_while_they_take_part():
    share = FairShare(1)
    with share.membership("a"), share.membership("b"):
        with share.membership("a"):  # the same owner counts once
            assert share.members == 2
    assert share.members == 0


def test_bad_slot_counts_are_refused():
    with pytest.raises(ValueError, match="slots"):
        FairShare(0)
    assert FairShare().slots == default_slots() >= 1


def _trainer(share: FairShare | None, steps: int = 40) -> Trainer:
    tok = CharTokenizer.from_text(TEXT)
    config = GPTConfig(vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_embd=16, block_size=8)
    data = TokenData.from_text(TEXT, tok, 8)
    train = TrainConfig(max_iters=steps, batch_size=4, eval_interval=steps, eval_iters=2, warmup_iters=0, device="cpu")
    return Trainer(GPT(config, generator=torch.Generator().manual_seed(0)), data, train,
                   observers=standard(train, share=share))


def test_trainings_sharing_turns_advance_together():
    share = FairShare(1)
    first, second = _trainer(share), _trainer(share)
    progress_when_first_ended = []

    def run_first() -> None:
        for _ in first.run():
            pass
        progress_when_first_ended.append(second.step)

    def run_second() -> None:
        for _ in second.run():
            time.sleep(0)  # a consumer between steps, as the app's handler is

    threads = [threading.Thread(target=run_first), threading.Thread(target=run_second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert first.step == second.step == 40
    assert progress_when_first_ended[0] >= 20  # not 0, as it would be first-come first-served
    assert share.members == 0


def test_stop_ends_a_training_waiting_for_its_turn_without_a_step():
    share = FairShare(1)
    trainer, events = _trainer(share), []
    with share.turn("someone else"):
        thread = threading.Thread(target=lambda: events.extend(trainer.run()))
        thread.start()
        time.sleep(0.1)
        assert share.members == 1 and not events  # waiting for the turn held here
        trainer.stop()
        thread.join(timeout=2)
    assert not thread.is_alive()
    assert [e.done for e in events] == [True] and events[0].stopped and trainer.step == 0


def test_sharing_changes_no_number():
    alone = _trainer(None)
    list(alone.run())
    share = FairShare(1)
    shared, other = _trainer(share), _trainer(share)
    thread = threading.Thread(target=lambda: list(other.run()))
    thread.start()
    list(shared.run())
    thread.join(timeout=60)
    assert [row["train_loss"] for row in shared.history] == [row["train_loss"] for row in alone.history]


def test_the_time_left_counts_the_wait_for_turns():
    trainer = _trainer(None)
    list(trainer.run(10))
    timing = trainer.observers[-1]
    assert isinstance(timing, Timing)
    timing.wait_per_step = 0.0
    before = timing.eta(trainer, 40)
    timing.wait_per_step = 0.5  # as if each step waited half a second for its turn
    assert timing.eta(trainer, 40) == pytest.approx(before + 30 * 0.5)


def test_the_wait_for_a_turn_is_measured_by_the_loop():
    share = FairShare(1)
    trainer, waits = _trainer(share), []

    def run() -> None:
        for _ in trainer.run(1):
            waits.append(trainer.observers[-1].wait_per_step)

    with share.turn("someone else"):
        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(0.2)  # the trainer's first step waits at least this long
    thread.join(timeout=60)
    assert waits[0] >= 0.2


def test_a_first_turn_goes_ahead_of_the_queue():
    share, order, lock = FairShare(1), [], threading.Lock()

    def wait_for_turn(owner: str, first: bool) -> None:
        with share.turn(owner, first):
            with lock:
                order.append(owner)

    with share.turn("holder"):
        threads = []
        for owner, first in (("old 1", False), ("old 2", False), ("newcomer", True)):
            threads.append(threading.Thread(target=wait_for_turn, args=(owner, first)))
            threads[-1].start()
            time.sleep(0.05)  # queued in this order
    for thread in threads:
        thread.join(timeout=5)
    assert order == ["newcomer", "old 1", "old 2"]


def test_a_trainer_says_whether_it_runs_until_its_final_event_or_a_dropped_run():
    trainer = _trainer(None, steps=5)
    events = trainer.run()
    next(events)
    assert trainer.running
    final = list(events)[-1]
    assert final.done and not trainer.running
    dropped = trainer.run(10)
    next(dropped)
    dropped.close()  # the caller went away midway
    assert not trainer.running
