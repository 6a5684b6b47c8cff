"""The figures' one palette: its colours stay apart under the common colour-vision deficiencies, and
the head labels, the runs, the rungs, the loss curves and the baby GPT's chain all take theirs from it."""

import itertools

import numpy as np
import pytest

from playground.figures import PALE_GREY, PALETTE, attention, baby, compare, ladder, training

# Machado, Oliveira and Fernandes (2009): what a person with each full deficiency sees, on linear RGB.
DEFICIENCIES = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
}
SRGB_TO_XYZ = [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
WHITE = [0.95047, 1.0, 1.08883]  # D65
APART = 15  # CIE76 ΔE: plainly two colours side by side (2.3 is the smallest difference one can see)


def seen(colour: str, deficiency: list[list[float]]) -> np.ndarray:
    """`colour` ("#rrggbb") as someone with `deficiency` sees it, in CIELAB."""
    srgb = np.array([int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array(SRGB_TO_XYZ) @ np.clip(np.array(deficiency) @ linear, 0, 1) / WHITE
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


@pytest.mark.parametrize("name", DEFICIENCIES)
def test_every_two_colours_stay_apart_under_each_deficiency(name):
    closest = min((float(np.linalg.norm(seen(a, DEFICIENCIES[name]) - seen(b, DEFICIENCIES[name]))), a, b)
                  for a, b in itertools.combinations((*PALETTE, PALE_GREY), 2))
    assert closest[0] >= APART, closest


def test_plotlys_old_colours_would_not():  # the check itself tells: D3's orange and green merge for a protanope
    orange, green = seen("#ff7f0e", DEFICIENCIES["protanopia"]), seen("#2ca02c", DEFICIENCIES["protanopia"])
    assert np.linalg.norm(orange - green) < 5


def test_the_figures_take_their_colours_from_the_palette():
    used = {*attention.LABEL_COLORS.values(), *compare.RUN_COLORS, *ladder.RUNG_COLORS, training.TRAIN_COLOR,
            training.VAL_COLOR, training.ANSWER_COLOR, training.ONSET_COLOR, baby.SEEN_COLOUR, baby.UNSEEN_COLOUR,
            baby.WALK_COLOUR}
    assert used <= {*PALETTE, PALE_GREY}
    assert len(set(attention.LABEL_COLORS.values())) == len(attention.LABEL_COLORS)  # one colour per label
