"""Small inline SVG charts for the HTML report: stacked histograms, curves and vertical markers.

Plain SVG text, so the report needs no plotting library and no network to open.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

import numpy as np

WIDTH, HEIGHT = 800, 260
LEFT, RIGHT, TOP, BOTTOM = 60, 160, 14, 36  # the legend sits in the right margin


@dataclass
class Chart:
    """A chart over ``x`` in ``[x0, x1]`` and ``y`` in ``[0, y1]``; add layers, then :meth:`svg`."""

    x0: float
    x1: float
    y1: float
    x_label: str = ""
    y_label: str = ""
    parts: list[str] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)

    def _x(self, x: float) -> float:
        return LEFT + (x - self.x0) / (self.x1 - self.x0 or 1) * (WIDTH - LEFT - RIGHT)

    def _y(self, y: float) -> float:
        return HEIGHT - BOTTOM - y / (self.y1 or 1) * (HEIGHT - TOP - BOTTOM)

    def stacked_bars(self, edges: np.ndarray, layers: list[tuple[str, str, np.ndarray]]) -> None:
        """Histogram bars over ``edges``; each layer ``(name, colour, counts)`` stacks on the
        previous ones."""
        base = np.zeros(len(edges) - 1)
        for name, colour, counts in layers:
            for k, count in enumerate(counts):
                if count <= 0:
                    continue
                x, x_end = self._x(edges[k]), self._x(edges[k + 1])
                y_top, y_bottom = self._y(base[k] + count), self._y(base[k])
                self.parts.append(
                    f'<rect x="{x:.1f}" y="{y_top:.1f}" width="{max(x_end - x - 0.5, 0.5):.1f}" '
                    f'height="{y_bottom - y_top:.1f}" fill="{colour}"><title>{escape(name)}: '
                    f'{int(count)}</title></rect>')
            base += counts
            self.legend.append((name, colour))

    def curve(self, xs: np.ndarray, ys: np.ndarray, colour: str, name: str = "",
              dashed: bool = False) -> None:
        points = " ".join(f"{self._x(x):.1f},{self._y(y):.1f}" for x, y in zip(xs, ys))
        dash = ' stroke-dasharray="5,3"' if dashed else ""
        self.parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                          f'stroke-width="2"{dash}/>')
        if name:
            self.legend.append((name, colour))

    def marker(self, x: float, label: str) -> None:
        px = self._x(x)
        self.parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" '
                          f'stroke="#333" stroke-dasharray="3,3"/><text x="{px + 3:.1f}" '
                          f'y="{TOP + 10}" font-size="10">{escape(label)}</text>')

    def svg(self) -> str:
        axes = [f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" '
                f'y2="{HEIGHT - BOTTOM}" stroke="#000"/>',
                f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#000"/>']
        for t in np.linspace(self.x0, self.x1, 6):
            axes.append(f'<text x="{self._x(t):.1f}" y="{HEIGHT - BOTTOM + 14}" font-size="10" '
                        f'text-anchor="middle">{t:.2g}</text>')
        for t in np.linspace(0, self.y1, 5):
            tick = f"{t:,.0f}" if self.y1 >= 10 else f"{t:.2g}"
            axes.append(f'<text x="{LEFT - 4}" y="{self._y(t) + 3:.1f}" font-size="10" '
                        f'text-anchor="end">{tick}</text>')
        axes.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 4}" font-size="11" '
                    f'text-anchor="middle">{escape(self.x_label)}</text>')
        axes.append(f'<text x="12" y="{(TOP + HEIGHT - BOTTOM) / 2}" font-size="11" '
                    f'text-anchor="middle" transform="rotate(-90 12 '
                    f'{(TOP + HEIGHT - BOTTOM) / 2})">{escape(self.y_label)}</text>')
        legend = []
        for k, (name, colour) in enumerate(self.legend):
            y = TOP + 4 + 14 * k
            legend.append(f'<rect x="{WIDTH - RIGHT + 12}" y="{y}" width="10" height="10" '
                          f'fill="{colour}"/><text x="{WIDTH - RIGHT + 26}" y="{y + 9}" '
                          f'font-size="10">{escape(name)}</text>')
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
                f'width="{WIDTH}" height="{HEIGHT}" role="img">' + "".join(axes + self.parts +
                                                                           legend) + "</svg>")
