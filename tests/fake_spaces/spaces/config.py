"""As in Hugging Face's `spaces` package: `Config.zero_gpu` is true on a ZeroGPU Space (SPACES_ZERO_GPU)."""

import os


class Settings:
    def __init__(self) -> None:
        self.zero_gpu = os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


Config = Settings()
