"""The fair queue order of YuniKorn 1.6 (YUNIKORN-2678), behind the compatibility switch.

Each child queue gets one number, its fair share: the largest, over the types it has
allocated, of ``allocated / denominator``, where the denominator is the queue's guaranteed
for that type, else its fair max for that type (a type with neither is ignored; a
denominator <= 0 gives 1 when something is allocated). The fair max of root is its max (the
cluster size); a child's is its parent's with the child's own max values put over it.
Children sort by priority then share (or share then priority), then larger pending first.

YuniKorn computes fair max in a list indexed by the children's original positions while the
sort permutes them, so siblings with different max may be compared with each other's fair
max; Korral uses each queue's own (the intended rule; docs/yunikorn-compat.md). Who may use
it: ``scheduler`` (the queue sort key, only when ``Compat.fair_share_queue_sort``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .queue import Queue

__all__ = ["fair_share", "fair_max"]


def fair_max(q: "Queue") -> dict[str, int]:
    """Root's max overridden, type by type, by each queue's own max down to ``q``."""
    out: dict[str, int] = {}
    for x in reversed(list(q.chain())):
        if x.max is not None:
            out.update(x.max._v)
    return out


def fair_share(q: "Queue") -> float:
    alloc = q.allocated._v
    if not alloc:
        return 0.0
    g = q.guaranteed._v if q.guaranteed is not None else {}
    fmax = None
    best = 0.0
    for k, a in alloc.items():
        if a < 0:
            continue
        d = g.get(k)
        if d is None:
            if fmax is None:
                fmax = fair_max(q)
            d = fmax.get(k)
            if d is None:
                continue
        share = (1.0 if a > 0 else 0.0) if d <= 0 else a / d
        if share > best:
            best = share
    return best
