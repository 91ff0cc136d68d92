"""One rmproxy, wired from its parts; each part is given what it uses, not the whole:

- ``BrokerSide`` (``broker_side``): the broker link, the one ownership view, requests to
  workers and their replies, and every message the broker sends;
- ``RMRegistry`` (``rm_registry``): the RMs this rmproxy holds and their lifecycle
  (registration, config updates, resyncs, stop);
- ``Router`` (``router``): the RMs' SI requests to the partitions' workers, and their outcomes
  back onto the RMs' streams;
- ``ConfigChanges`` (``config_changes``): every config change, one per RM at a time, audited.

The gRPC services (``service``) and the REST API (``webapi.build_app``) take the parts they use.
All of it runs on one asyncio loop with the gRPC and REST servers (``main``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

from common import registry
from rmproxy.broker_side import BrokerSide
from rmproxy.config_changes import ConfigChanges
from rmproxy.rm_registry import RM_TIMEOUT, RMRegistry
from rmproxy.rms import RMSession
from rmproxy.router import HOLD_SECONDS, Router

__all__ = ["Proxy"]


class Proxy:
    def __init__(self, broker: str, store: registry.AsyncRegistryStore, name: str = "",
                 rm_timeout: float = RM_TIMEOUT, curve: tuple[str | None, str | None] = (None, None),
                 hold_seconds: float = HOLD_SECONDS) -> None:
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.started_ns = time.time_ns()
        self.store = store
        self.broker = BrokerSide(broker, self.name, curve)
        rms: dict[str, RMSession] = {}  # the RM sessions: the registry keeps them, the router reads them
        self.router = Router(rms, self.broker, hold_seconds)
        self.registry = RMRegistry(rms, store, self.broker, self.router, rm_timeout)
        self.broker.attach(self.registry, self.router)
        self.config_changes = ConfigChanges(self.registry, store)

    @property
    def dropped(self) -> int:
        """Envelopes dropped: bad frames, outcomes of an epoch the RM moved past, malformed rows."""
        return self.broker.dropped + self.router.dropped

    async def run(self) -> None:
        """The broker link and the registry's upkeep, until cancelled."""
        await asyncio.gather(self.broker.run(), self.registry.maintain())
