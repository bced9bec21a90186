"""grad_probe's similarity pictures (``similarities_picture/{name}_similarities.png``, as msprobe 1.0.4 names them):
drawn with matplotlib when it is installed (an optional extra, ~40 MB: not a dependency for two line charts), else
the same chart as a self-contained SVG (``.svg``: a browser opens it), said once per compare."""

from __future__ import annotations

import functools
import importlib.util
from typing import List, Sequence
from xml.sax.saxutils import escape

from ptdbg_ascend.fs.writes import replace_file, replace_text_file

WIDTH, HEIGHT, MARGIN = 640, 400, 50


@functools.lru_cache(maxsize=1)
def has_matplotlib() -> bool:
    """Whether matplotlib is installed (looked up once per process: asked for every picture)."""
    return importlib.util.find_spec("matplotlib") is not None


def save_picture(path_stem: str, title: str, steps: Sequence[int], values: Sequence[float],
                 threshold: float) -> str:
    """Draw ``values`` (similarities, 0-1) against ``steps`` with the ``threshold`` line; returns the file written
    (``{path_stem}.png`` with matplotlib, else ``{path_stem}.svg``)."""
    if has_matplotlib():
        return _png(path_stem + ".png", title, steps, values, threshold)
    path = path_stem + ".svg"
    replace_text_file(path, [svg_text(title, steps, values, threshold)], "the similarity picture")
    return path


def svg_text(title: str, steps: Sequence[int], values: Sequence[float], threshold: float) -> str:
    """The chart as SVG text: steps on x, similarity 0-1 on y, the threshold dashed."""
    plot_width, plot_height = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    last = max(len(steps) - 1, 1)

    def x(index: int) -> float:
        return MARGIN + plot_width * index / last

    def y(value: float) -> float:
        return MARGIN + plot_height * (1.0 - min(max(value, 0.0), 1.0))

    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    parts: List[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="25" text-anchor="middle" font-family="sans-serif" font-size="15">'
        f'{escape(title)}</text>',
        f'<line x1="{MARGIN}" y1="{MARGIN + plot_height}" x2="{MARGIN + plot_width}" y2="{MARGIN + plot_height}" '
        'stroke="black"/>',
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{MARGIN + plot_height}" stroke="black"/>',
        f'<line x1="{MARGIN}" y1="{y(threshold):.1f}" x2="{MARGIN + plot_width}" y2="{y(threshold):.1f}" '
        'stroke="red" stroke-dasharray="4 3"/>',
        f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="2"/>',
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 10}" text-anchor="middle" font-family="sans-serif" font-size="12">'
        'steps</text>',
        f'<text x="14" y="{HEIGHT / 2}" transform="rotate(-90 14 {HEIGHT / 2})" text-anchor="middle" '
        'font-family="sans-serif" font-size="12">similarities</text>',
    ]
    for tick in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{MARGIN - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" font-family="sans-serif" '
                     f'font-size="11">{tick:g}</text>')
    stride = max(1, len(steps) // 10)
    for index in range(0, len(steps), stride):
        parts.append(f'<text x="{x(index):.1f}" y="{MARGIN + plot_height + 16}" text-anchor="middle" '
                     f'font-family="sans-serif" font-size="11">{int(steps[index])}</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)


def _png(path: str, title: str, steps: Sequence[int], values: Sequence[float], threshold: float) -> str:
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    try:
        axes.plot(list(steps), list(values))
        axes.axhline(threshold, color="red", linestyle="--", linewidth=1)
        axes.set_xlabel("steps")
        axes.set_ylabel("similarities")
        axes.set_title(title)
        axes.set_ylim(0, 1.02)

        def write(descriptor: int) -> None:
            with open(descriptor, "wb", closefd=False) as handle:
                figure.savefig(handle, format="png")

        replace_file(path, write, "the similarity picture")
    finally:
        plt.close(figure)
    return path
