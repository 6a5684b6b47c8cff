"""How a live run paces its updates to the page, for every tab that streams a training (Train and
Ladder): the refresh rate, how much rarer refreshes come on a crowded server, how long Stop waits,
and how a time left reads.

    slower = slowdown(share.members, share.slots)        # 1.0 until the server is crowded
    if now - last_ui < UI_INTERVAL_S * slower: continue   # skip this update
    f"about {duration(event.eta)} left"

Never imports a tab, core's training or gradio: numbers and one formatter, shared.
"""

from __future__ import annotations

UI_INTERVAL_S = 0.25  # live view refresh: 4 a second, so a long run never floods the browser
# Up to this many trainings per compute slot refresh at the rates here; beyond, every refresh comes
# proportionally less often, so sixty learners' refreshes cost the server no more than four's on two
# cores (measured at 60: refreshes at twice this rate made the first points 15% and the runs 20% slower).
FULL_RATE_PER_SLOT = 2
STOP_WAIT_S = 3.0  # Stop answers once training has ended, waiting at most this long


def slowdown(sharing: int, slots: int) -> float:
    """How many times rarer each refresh comes while `sharing` trainings share `slots` compute slots."""
    return max(1.0, sharing / (FULL_RATE_PER_SLOT * slots))


def duration(seconds: float) -> str:
    """'42 s' or '3 min 05 s'."""
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"
