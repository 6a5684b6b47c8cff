"""python -m playground [--host 127.0.0.1] [--port N] [--share] [--no-caps] [--open] [--mcp] [--gguf PATH]

Starts the app on this machine only (127.0.0.1) at the first free port from 7860 and prints
its URL. `--host 0.0.0.0` serves a workshop's network; `--no-caps` lifts the model-size caps
for one person on a laptop; `--share` asks Gradio for a public link (off unless asked); `--mcp`
also serves the public API's events as MCP tools (Gradio's MCP server, at /gradio_api/mcp/); `--gguf PATH`
offers the GGUF models of PATH (a .gguf file, a folder of them or an Ollama models folder) in Generate and
Attention's Model picker (the setting PLAYGROUND_GGUF_DIR).
`pip install -e .` installs this as the command `attention-playground`.

The arguments are parsed before anything heavy is imported: `--help` or a mistyped flag answers at once,
not after torch and Gradio have loaded (a minute or two on a busy machine).
Never imports a tab: the app assembles them.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m playground", description="Attention Playground")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: this machine only)")
    parser.add_argument("--port", type=int, default=None, help="port (default: the first free one from 7860)")
    parser.add_argument("--share", action="store_true", help="also create a public gradio.live link")
    parser.add_argument("--no-caps", action="store_true", help="lift the model-size caps (for your own machine)")
    parser.add_argument("--open", action="store_true", help="open the app in a browser")
    parser.add_argument("--mcp", action="store_true",
                        help="also serve the API as MCP tools at /gradio_api/mcp/ (train, stop, generate, attention, ...)")
    parser.add_argument("--gguf", type=existing, metavar="PATH",
                        help="offer the GGUF models of PATH: a .gguf file, a folder of them, or an Ollama models folder")
    return parser.parse_args(argv)


def existing(raw: str) -> Path:
    path = Path(raw).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{raw} does not exist")
    return path


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from playground.app import build_app, launch_kwargs  # torch and Gradio: only once the arguments are good
    from playground.settings import Settings

    overrides = {"gguf_dir": str(args.gguf)} if args.gguf else {}
    settings = Settings.local(**overrides) if args.no_caps else Settings.from_env(**overrides)
    demo = build_app(settings)
    kwargs = launch_kwargs(settings, host=args.host, port=args.port, mcp=args.mcp, routes=demo.routes)
    demo.launch(**{**kwargs, "share": args.share, "inbrowser": args.open})


if __name__ == "__main__":
    main()
