"""Plotly figure builders: pure functions from numbers and labels to `go.Figure` (no Gradio)."""
