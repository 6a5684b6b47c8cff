"""Plotly figures of the inside of a head: its arithmetic for one query token step by step, how
much each head matters (the loss when it alone is switched off), and the logit lens.

Figures only draw; every number comes from `core.interventions` (HeadSteps, head_importance,
LogitLens). Cells show numbers rounded; hover shows them as the model holds them: 9 significant
digits are a float32 exactly.

Never imports a tab, the sessions or gradio: figures draw the numbers they are given.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from core.interventions import HeadSteps, LogitLens
from playground.figures.attention import COLORSCALE, TITLE_TOP_PX, TOP_MARGIN_PX, _top, axis_labels

EXACT = ".9g"  # a float32 to the last digit
DIVERGING = "RdBu_r"  # negative blue, positive red, white at 0
MASKED_COLOR = "#d9d9d9"  # what shows through a masked cell (its value is -inf: no colour)
TEXT_MIN_ROW_PX = 14  # thinner rows hide their numbers (hover still has them)
VECTOR_TEXT_MAX_DIMS = 16  # wider vectors are drawn as colour only
LENS_TEXT_MAX_TOKENS = 64  # more positions than this and the lens cells lose their top-1 token
LENS_TEXT_CHARS = 4  # a top-1 token longer than this is cut in its cell


def _names(labels: list[str]) -> list[str]:
    return axis_labels(labels, [(t, t + 1) for t in range(len(labels))])


def _title(title: str, note: str) -> dict:
    """The tab's figure top, with the title from the figure's left edge rather than the plot's: on a
    phone the plot beside wide row labels is narrow, and plotly does not wrap titles."""
    top = _top(title, note)
    top["title"].update(xref="container", x=0, pad=dict(t=TITLE_TOP_PX, l=10))
    return top


def _row_px(rows: int, budget: int, low: int, high: int) -> int:
    """Pixels per row: `budget` shared by the rows, within [low, high]."""
    return max(low, min(high, budget // max(1, rows)))


def _cell(value: float, digits: int) -> str:
    """A value rounded for its cell; -inf as the mask writes it, and no "-0.00"."""
    if value == float("-inf"):
        return "−∞"
    text = f"{value:.{digits}f}"
    return text.lstrip("-") if float(text) == 0 else text


def steps_table(steps: HeadSteps, labels: list[str], *, without_scale: bool = False,
                without_mask: bool = False) -> go.Figure:
    """One row per key: q·k, divided by sqrt(d), masked (as far as the model does either), and the softmax
    (the heatmap's row); the toggles add the weights without the division and without the mask.

    Each column is coloured on its own scale (the weights on 0 to 1); a masked cell is grey.
    """
    d = steps.q.numel()
    # Only the steps the model takes: a model built without the scaling or the mask has no such column.
    columns = [("q·k", steps.scores, 2)] + ([(f"÷√{d}", steps.scaled, 2)] if steps.scale_attention else [])
    masks = steps.causal or bool(torch.isinf(steps.masked).any())  # a sliding window masks without the causal mask
    if steps.alibi is not None:  # ALiBi's penalty, then the scores with it (and the mask)
        columns += [("ALiBi −m·dist", steps.alibi, 2), ("+ ALiBi, mask" if masks else "+ ALiBi", steps.masked, 2)]
    elif masks:
        columns.append(("+ mask", steps.masked, 2))
    columns.append(("softmax", steps.weights, 3))
    if without_scale:
        columns.append((f"no ÷√{d}", steps.weights_unscaled, 3))
    if without_mask:
        columns.append(("no mask", steps.weights_unmasked, 3))
    names = _names(labels)
    shown = [f"<b>{name} (query)</b>" if t == steps.query else name for t, name in enumerate(names)]
    rows = len(names)
    z = np.full((rows, len(columns)), np.nan, dtype=np.float32)
    text = [["" for _ in columns] for _ in range(rows)]
    exact = [["" for _ in columns] for _ in range(rows)]
    for c, (header, values, digits) in enumerate(columns):
        values = values.float()
        finite = torch.isfinite(values)
        if digits == 3:  # a weight: its own colour
            z[:, c] = values.numpy()
        elif finite.any():  # a score: colour from its column's smallest to its largest
            low, high = values[finite].min(), values[finite].max()
            z[finite.numpy(), c] = ((values[finite] - low) / (high - low).clamp(min=1e-12)).numpy()
        for t, value in enumerate(values.tolist()):
            text[t][c] = _cell(value, digits)
            hidden = "a later token" if t > steps.query else "beyond the window"
            exact[t][c] = f"−∞ (masked: {hidden})" if value == float("-inf") else f"{value:{EXACT}}"
    row_px = _row_px(rows, 900, 8, 24)
    fig = go.Figure(go.Heatmap(
        z=z, x=[header for header, _, _ in columns], y=names, colorscale=COLORSCALE, zmin=0, zmax=1,
        showscale=False, xgap=1, ygap=1, customdata=exact,
        text=text, texttemplate="%{text}" if row_px >= TEXT_MIN_ROW_PX else None, textfont=dict(size=10),
        hovertemplate="key %{y}<br>%{x}: %{customdata}<extra></extra>",
    ))
    fig.update_xaxes(side="top", type="category", tickfont=dict(size=11))
    fig.update_yaxes(type="category", autorange="reversed", tickvals=names, ticktext=shown, tickfont=dict(size=10))
    fig.update_layout(
        **_title(f"Layer {steps.layer}, head {steps.head}, query {names[steps.query]}",
               f"Rows: keys{'; grey: masked' if masks else ''}. Hover: exact values"),
        height=rows * row_px + TOP_MARGIN_PX + 60, margin=dict(l=90, r=20, t=TOP_MARGIN_PX + 24, b=10),
        plot_bgcolor=MASKED_COLOR,
    )
    return fig


def steps_vectors(steps: HeadSteps, labels: list[str]) -> go.Figure:
    """The vectors, one row each: the query q, every key k (with RoPE, each before and after its turn),
    every value times its weight, and their sum, the head's output for the query token. Colour: sign
    and size, each panel on its own scale; numbers in the cells when the vectors are short."""
    names = _names(labels)
    query = names[steps.query]
    if steps.q_unrotated is not None:  # RoPE: each vector before and after its turn by position
        panels = [
            (f"query q of {query}, before RoPE", steps.q_unrotated[None], [query]),
            (f"q turned by its position ({steps.query})", steps.q[None], [query]),
            ("keys k, before RoPE", steps.k_unrotated, names),
            ("keys turned by their positions", steps.k, names),
        ]
    else:
        panels = [(f"query q of {query}", steps.q[None], [query]), ("keys k", steps.k, names)]
    panels += [
        ("values × their weight", steps.weighted, names),
        ("output: the sum of the rows above", steps.output[None], ["output"]),
    ]
    d = steps.q.numel()
    gap_px = 40  # room for a panel's title
    total_rows = sum(len(rows) for _, _, rows in panels)
    row_px = _row_px(total_rows, 700, 3, 22)
    plot_px = total_rows * row_px + gap_px * len(panels)
    show_text = d <= VECTOR_TEXT_MAX_DIMS and row_px >= TEXT_MIN_ROW_PX
    data, layout, titles = [], {}, []
    top = 1.0
    for n, (title, values, rows) in enumerate(panels, start=1):
        values = values.float().numpy()
        span = float(np.abs(values).max()) or 1.0
        height = len(rows) * row_px / plot_px
        bottom = top - gap_px / plot_px - height
        data.append(go.Heatmap(
            z=values.astype(np.float32), x=list(range(d)), y=rows, xaxis=f"x{n}", yaxis=f"y{n}",
            colorscale=DIVERGING, zmin=-span, zmax=span, showscale=False,
            text=[[_cell(v, 2) for v in row] for row in values.tolist()] if show_text else None,
            texttemplate="%{text}" if show_text else None, textfont=dict(size=9),
            hovertemplate=f"{title}<br>%{{y}}, dimension %{{x}}: %{{z:{EXACT}}}<extra></extra>",
        ))
        layout[f"xaxis{n}"] = dict(domain=[0, 1], anchor=f"y{n}", showticklabels=n == len(panels),
                                   title="dimension of the head" if n == len(panels) else None, dtick=max(1, d // 8))
        layout[f"yaxis{n}"] = dict(domain=[max(0.0, bottom), top - gap_px / plot_px], anchor=f"x{n}",
                                   type="category", autorange="reversed", tickfont=dict(size=9))
        titles.append(dict(text=f"<b>{title}</b>", x=0, y=top - 8 / plot_px, xref="paper", yref="paper",
                           xanchor="left", yanchor="top", showarrow=False, font=dict(size=12)))
        top = bottom
    return go.Figure(data=data, layout=dict(
        layout, annotations=titles,
        **_title(f"Its vectors (d = {d})", "Red +, blue −, a scale per panel. Hover: exact"),
        height=plot_px + TOP_MARGIN_PX + 70, margin=dict(l=90, r=20, t=TOP_MARGIN_PX, b=50),
        plot_bgcolor="white",
    ))


def head_grid(values: torch.Tensor, title: str, note: str, *, colorbar: str, hover: str,
              span: float | None = None) -> go.Figure:
    """(L, H) one number per head: red above 0, blue below, white at 0 (on +-`span`, default the
    largest size), the number in each cell and exact in the hover."""
    n_layer, n_head = values.shape
    values = values.float().numpy()
    span = span or float(np.abs(values).max()) or 1.0
    fig = go.Figure(go.Heatmap(
        z=values.astype(np.float32), x=[f"H{h}" for h in range(n_head)], y=[f"L{layer}" for layer in range(n_layer)],
        colorscale=DIVERGING, zmin=-span, zmax=span, xgap=2, ygap=2,
        colorbar=dict(title=colorbar, thickness=12),
        text=[[f"{v:+.3f}" for v in row] for row in values.tolist()], texttemplate="%{text}",
        textfont=dict(size=10 if n_head <= 8 else 8),
        hovertemplate=f"layer %{{y}} head %{{x}}<br>{hover} %{{z:{EXACT}}}<extra></extra>",
    ))
    fig.update_xaxes(side="top", type="category")
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(
        **_title(title, note),
        height=max(260, 44 * n_layer + TOP_MARGIN_PX + 60), margin=dict(l=50, r=20, t=TOP_MARGIN_PX + 20, b=20),
        plot_bgcolor="white",
    )
    return fig


def importance_figure(importance: torch.Tensor, mode_name: str, note: str = "") -> go.Figure:
    """(L, H) loss increase per head switched off alone: red where the loss rises, blue where it falls;
    `note` (if any) joins the subtitle."""
    return head_grid(importance, "Loss increase, each head alone off",
                     f"Switched off: {mode_name}" + (f". {note}" if note else ""),
                     colorbar="loss<br>increase", hover=f"off ({mode_name}): loss increase")


def lens_figure(lens: LogitLens, labels: list[str], top_labels: list[list[list[str]]]) -> go.Figure:
    """Depth (rows) x position (columns): colour the probability of the token that really comes
    next, text the top-1 prediction, hover the top k. `top_labels[depth][position]` names lens.top_ids'
    tokens. The last position has no next token in the text: only its predictions show."""
    n_depths, n_tokens, _ = lens.top_ids.shape
    names = _names(labels)
    probs = np.full((n_depths, n_tokens), np.nan, dtype=np.float32)
    probs[:, :-1] = lens.target_probs.float().numpy()
    top_probs, ranks = lens.top_probs.tolist(), lens.target_ranks.tolist()
    hover, text = [], []
    for depth in range(n_depths):
        hover.append([])
        text.append([])
        for t in range(n_tokens):
            tops = "<br>".join(f"{label} {p:.4f}" for label, p in zip(top_labels[depth][t], top_probs[depth][t]))
            if t + 1 < n_tokens:
                truth = (f"next in the text: {labels[t + 1]}, p = {probs[depth, t]:{EXACT}} "
                         f"(rank {ranks[depth][t] + 1})")
            else:
                truth = "the end of the text: nothing to compare"
            hover[-1].append(f"{lens.depths[depth]}, after {names[t]}<br>{truth}<br>top:<br>{tops}")
            top1 = top_labels[depth][t][0]
            text[-1].append(top1 if len(top1) <= LENS_TEXT_CHARS else top1[:LENS_TEXT_CHARS - 1] + "…")
    show_text = n_tokens <= LENS_TEXT_MAX_TOKENS
    fig = go.Figure(go.Heatmap(
        z=probs, x=names, y=lens.depths, colorscale=COLORSCALE, zmin=0, zmax=1, xgap=1, ygap=1,
        colorbar=dict(title=dict(text="p", side="top"), thickness=10, tickvals=[0, 0.5, 1]),  # narrow: a phone
        customdata=hover,
        text=text, texttemplate="%{text}" if show_text else None, textfont=dict(size=10),
        hovertemplate="%{customdata}<extra></extra>",
    ))
    fig.update_xaxes(type="category", tickangle=-90, tickfont=dict(size=10))
    fig.update_yaxes(type="category", autorange="reversed")
    fig.update_layout(
        **_title("What each depth would predict", "Colour: p(real next token). Text: top guess"),
        height=max(300, 40 * n_depths + TOP_MARGIN_PX + 120), margin=dict(l=90, r=20, t=TOP_MARGIN_PX + 20, b=70),
        plot_bgcolor=MASKED_COLOR,
    )
    return fig
