"""Attention Playground's Gradio app: `python -m playground` starts it (see `playground.app`).

Never imports a tab at package import: `import playground.validate` must not build the app.
"""
