"""Hot reload of the configmaps: ``yunikorn-defaults`` and ``yunikorn-configs`` watched in the
shim's namespace, applied to Korral with ``UpdateConfiguration`` when they change.

As YuniKorn's shim: nothing is reloaded while the running ``service.enableConfigHotRefresh`` is
false; the settings YuniKorn reads only at start keep their running value, with a warning (log
and a ``ConfigKept`` event). A configmap that cannot be read, or a config Korral refuses, leaves
the previous configuration in place and says why in the log and in a ``ConfigRejected`` event on
the configmap. When Korral cannot be reached the reload is retried.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

import grpc

from common import si_v18_pb2 as si
from si_client import SchedulerError
from k8s_shim.config import CONFIGS_NAME, DEFAULTS_NAME, ConfigMapError, Loaded, load
from k8s_shim.writes.events import WARNING, EventRecorder, Regarding

__all__ = ["Reloader"]

log = logging.getLogger(__name__)
RETRY_SECONDS = 5.0


class Reloader:
    def __init__(self, namespace: str, events: EventRecorder) -> None:
        self.namespace = namespace
        self.events = events
        self.configmaps: dict[str, dict] = {}
        self.loaded: Loaded | None = None  # what Korral runs with
        self.refused: Loaded | None = None  # the last config Korral refused: not sent again unchanged
        self.api = None  # set once registered
        self.reloads = self.refusals = 0
        self._pending = False
        self._last_changed = CONFIGS_NAME
        self.changed_event = asyncio.Event()  # set at every change of the configmaps (start-up waits on it)
        self._task: asyncio.Task | None = None
        self.applied: Callable[[Loaded], None] | None = None  # told of each configuration Korral took

    # ------------------------------------------------------------------ the informer's side
    def decode(self, raw: dict, old) -> dict | None:
        meta = raw.get("metadata") or {}
        if meta.get("name") not in (DEFAULTS_NAME, CONFIGS_NAME):
            return None
        return {"metadata": {"name": meta["name"], "uid": meta.get("uid", "")},
                "data": raw.get("data") or {}, "binaryData": raw.get("binaryData") or {}}

    def changed(self, old: dict | None, new: dict | None) -> None:
        name = (new or old)["metadata"]["name"]
        if new is None:
            self.configmaps.pop(name, None)
        else:
            self.configmaps[name] = new
        self._last_changed = name
        self.changed_event.set()
        if self.api is not None and not self._pending:
            self._pending = True
            self._task = asyncio.get_running_loop().create_task(self.reload())  # kept: the loop holds tasks weakly

    # ------------------------------------------------------------------ loading
    def current(self) -> list[dict | None]:
        return [self.configmaps.get(DEFAULTS_NAME), self.configmaps.get(CONFIGS_NAME)]

    def initial(self) -> Loaded:
        """The configuration to register with (a second call keeps the first one's non-reloadable
        settings); ``ConfigMapError``, also posted as an event."""
        self.changed_event.clear()
        try:
            loaded, warnings = load(self.current(), self.loaded.conf if self.loaded else None)
        except ConfigMapError as exc:
            self._refused(str(exc), "nothing is scheduled until it is fixed")
            raise
        for warning in warnings:
            log.warning("configmap %s/%s: %s", self.namespace, self._last_changed, warning)
        self.loaded = loaded
        return loaded

    def _refused(self, why: str, outcome: str) -> None:
        self.refusals += 1
        log.error("configmap %s/%s not applied: %s; %s", self.namespace, self._last_changed, why, outcome)
        cm = self.configmaps.get(self._last_changed) or {"metadata": {"uid": ""}}
        self.events.post(Regarding("ConfigMap", self._last_changed, self.namespace, cm["metadata"].get("uid", "")),
                         WARNING, "ConfigRejected", f"configuration not applied: {why}; {outcome}")

    def refused_at_start(self, details: str) -> None:
        self._refused(f"Korral refused the registration: {details}",
                      "nothing is scheduled until the configmaps change")

    async def reload(self) -> None:
        self._pending = False
        running = self.loaded
        assert running is not None and self.api is not None
        if not running.conf.enable_config_hot_refresh:
            log.info("service.enableConfigHotRefresh is false: configmap change not applied (restart to apply)")
            return
        try:
            loaded, warnings = load(self.current(), running.conf)
        except ConfigMapError as exc:
            self._refused(str(exc), "the previous configuration stays")
            return
        for warning in warnings:
            log.warning("configmap %s/%s: %s", self.namespace, self._last_changed, warning)
            self.events.post(Regarding("ConfigMap", self._last_changed, self.namespace), WARNING, "ConfigKept", warning)
        if loaded.same_for_korral(running) or loaded.same_for_korral(self.refused):
            self.loaded = Loaded(loaded.conf, running.queues, running.extra)
            return
        request = si.UpdateConfigurationRequest(rmID=running.conf.cluster_id, policyGroup=loaded.conf.policy_group,
                                                config=loaded.queues, extraConfig=loaded.extra)
        try:
            await self.api.update_configuration_async(request)
        except SchedulerError as exc:
            if exc.code is grpc.StatusCode.INVALID_ARGUMENT:
                self._refused(f"Korral refused it: {exc.details}", "the previous configuration stays")
                self.refused = loaded
                return
            log.warning("configuration reload not applied now (%s): retrying in %.0fs", exc, RETRY_SECONDS)
            await asyncio.sleep(RETRY_SECONDS)
            if not self._pending:
                await self.reload()
            return
        self.loaded, self.refused = loaded, None
        self.reloads += 1
        if self.applied is not None:
            self.applied(loaded)
        log.info("configuration reloaded from configmaps %s, %s", DEFAULTS_NAME, CONFIGS_NAME)
