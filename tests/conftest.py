"""Shared test setup: offline data, small models, fixed seeds."""

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

# Tiny Shakespeare comes from ../shared/data (as in CI); tests never download it.
os.environ.setdefault("PLAYGROUND_DATA_DIR", str(REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
