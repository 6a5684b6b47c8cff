"""Hugging Face Spaces entry point (`app_file: app.py`): the playground with the server's caps.

Spaces route traffic to 0.0.0.0:7860; caps can be changed with PLAYGROUND_* variables
(see playground/settings.py).
"""

from playground.app import build_app, launch_kwargs
from playground.settings import Settings

settings = Settings.from_env()
demo = build_app(settings)

if __name__ == "__main__":
    demo.launch(**launch_kwargs(settings, host="0.0.0.0", port=7860, routes=demo.routes))
