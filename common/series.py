"""Figures of a measured series: nearest-rank percentiles and a trend.

The one definition the benches (``e2e``, ``backlog``, ``churn``, ``k8s``), their plots and the
simulator's statistics use, so a p99 means the same in every report.
"""

from __future__ import annotations

__all__ = ["percentile", "slope"]


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, -(-len(ordered) * q // 100) - 1))]


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 for fewer than two distinct x)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in points) / var
