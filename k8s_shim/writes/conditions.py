"""The ``PodScheduled`` condition of a pod that waits, and Korral's words for why it waits.

The core reports an ask's scheduling state (``FAILED``: no node fits now, ``SKIPPED``: a queue
limit holds it). The shim writes the pod's condition as YuniKorn's shim does: ``PodScheduled=False``
with reason ``Unschedulable`` (what the cluster autoscaler looks for) or ``SchedulingSkipped``.
The message is Korral's explanation when a REST address is known (``explain_message``: the
answer of ``/ws/v1/korral/partition/{p}/application/{app}/allocation/{key}/explain``, worded as
kube-scheduler words it: ``0/3 nodes are available: 2 insufficient free resources, 1 node
selector does not match.``), else the core's reason.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

import aiohttp
import orjson

from common.partitions import qualified_name
from k8s_shim.writes.events import micro_time

__all__ = ["condition_patch", "stamp", "explain_message", "Explainer", "UNSCHEDULABLE", "SKIPPED"]

log = logging.getLogger(__name__)

UNSCHEDULABLE = "Unschedulable"
SKIPPED = "SchedulingSkipped"


def stamp(now: float) -> str:
    """A condition's time: whole seconds, UTC."""
    return micro_time(now).split(".")[0] + "Z"


def condition_patch(reason: str, message: str, now: float) -> dict:
    """The strategic merge patch of ``status`` (conditions merge by type)."""
    return {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": reason,
                                       "message": message, "lastTransitionTime": stamp(now), "lastProbeTime": None}]}}


def explain_message(e: dict) -> str:
    """kube-scheduler's way of saying why: how many nodes fit, then the rejections by stage, then
    the queue or limit that holds the ask."""
    nodes = dict(e.get("nodes") or {})
    fits = nodes.pop("fits", 0)
    total = fits + sum(nodes.values())
    parts = [f"{n} {stage}" for stage, n in sorted(nodes.items(), key=lambda kv: (-kv[1], kv[0])) if n]
    text = f"{fits}/{total} nodes are available" + (f": {', '.join(parts)}." if parts else ".")
    if e.get("queueHeadroomBlockedBy"):
        text += f" Held by the headroom of queue {e['queueHeadroomBlockedBy']}."
    if e.get("limitBlockedBy"):
        text += f" Held by a limit: {e['limitBlockedBy']}."
    if e.get("reason") and not parts:
        text += f" {e['reason']}"
    return text


class Explainer:
    """Asks rmproxy's REST API why an ask waits (one GET, on demand). Without an address, or when
    the API does not answer, ``explain`` returns None and the core's reason is used."""

    def __init__(self, rest_address: str, rm_id: str) -> None:
        self.base = f"http://{rest_address}" if rest_address and "://" not in rest_address else rest_address
        self.rm_id = rm_id
        self._session: aiohttp.ClientSession | None = None

    async def explain(self, app_id: str, key: str, partition: str = "default") -> str | None:
        if not self.base:
            return None
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        where = quote(qualified_name(self.rm_id, partition), safe='')
        url = (f"{self.base}/ws/v1/korral/partition/{where}/application/"
               f"{quote(app_id, safe='')}/allocation/{quote(key, safe='')}/explain")
        try:
            async with self._session.get(url) as resp:
                if resp.status != 200:
                    return None
                return explain_message(orjson.loads(await resp.read()))
        except (aiohttp.ClientError, OSError, TimeoutError, orjson.JSONDecodeError) as exc:
            log.debug("explain of %s/%s unavailable: %s", app_id, key, exc)
            return None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
