"""Training curves as inline SVG, drawn in Python: no script, no network, one small plot per metric."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Any

# (key in metrics.jsonl, title); step time is rollout_s + train_s.
CURVES = [
    ("success", "success"),
    ("reward", "reward"),
    ("kl", "KL to reference"),
    ("entropy", "entropy"),
    ("clip_fraction", "clip fraction"),
    ("invalid_actions", "invalid actions / episode"),
    ("rollout_tokens_per_s", "rollout tokens/s"),
    ("train_tokens_per_s", "train tokens/s"),
    ("step_s", "step time (s)"),
    ("loss", "loss"),
]
W, H, PAD = 280, 150, 34


@dataclass
class Plot:
    key: str
    title: str
    svg: str
    points: int


def series(rows: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    points = []
    for row in rows:
        value = _step_s(row) if key == "step_s" else row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            points.append((float(row["step"]), float(value)))
    return points


def plots(rows: list[dict[str, Any]]) -> list[Plot]:
    """One plot per curve that has at least one point in `rows`."""
    out = []
    for key, title in CURVES:
        points = series(rows, key)
        if points:
            out.append(Plot(key, title, line_svg(points, title, key), len(points)))
    return out


def line_svg(points: list[tuple[float, float]], title: str, key: str) -> str:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1

    def at(x: float, y: float) -> str:
        return f"{PAD + (x - x0) / (x1 - x0) * (W - PAD - 8):.1f},{H - 20 - (y - y0) / (y1 - y0) * (H - 40):.1f}"

    line = " ".join(at(x, y) for x, y in points)
    dots = "".join(
        f'<circle cx="{at(x, y).split(",")[0]}" cy="{at(x, y).split(",")[1]}" r="2">'
        f"<title>step {x:g}: {y:.4g}</title></circle>"
        for x, y in points
    )
    return (
        f'<svg class="plot" data-metric="{escape(key)}" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'role="img" aria-label="{escape(title)}">'
        f'<text x="{PAD}" y="12" class="t">{escape(title)}</text>'
        f'<line x1="{PAD}" y1="{H - 20}" x2="{W - 8}" y2="{H - 20}" class="ax"/>'
        f'<line x1="{PAD}" y1="20" x2="{PAD}" y2="{H - 20}" class="ax"/>'
        f'<text x="2" y="24" class="l">{y1:.3g}</text><text x="2" y="{H - 20}" class="l">{y0:.3g}</text>'
        f'<text x="{PAD}" y="{H - 6}" class="l">step {x0:g}</text>'
        f'<text x="{W - 60}" y="{H - 6}" class="l">{x1:g}</text>'
        f'<polyline points="{line}" class="ln"/>{dots}</svg>'
    )


def _step_s(row: dict[str, Any]) -> float | None:
    parts = [row.get("rollout_s"), row.get("train_s")]
    values = [v for v in parts if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(values) if values else None
