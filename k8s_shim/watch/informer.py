"""An informer of our own: list, then watch from the list's resourceVersion; relist on 410.

``Informer(client, path, decode, on_change)`` keeps a store of one kind of object, each kept as
what ``decode(raw, old)`` makes of it: only the fields its user needs, so 50,000 pods cost what
their few fields cost, not what the API's objects do (``decode`` gets the previous kept value to
reuse what cannot have changed; returning None keeps nothing, as if the object were gone).
``on_change(old, new)`` is called for every change, in order, on the event loop: ``(None, new)``
added, ``(old, new)`` updated, ``(old, None)`` deleted.

The protocol, as client-go's reflector and as the recordings of a real kube-apiserver show it:

- list in pages (``limit``/``continue``) without ``resourceVersion``: a consistent read; a
  continue token that expired (410) restarts the list. The list replaces the store and the
  differences become changes (a relist after a watch gap reports what was missed);
- watch from the list's ``resourceVersion`` with ``allowWatchBookmarks=true`` and a
  ``timeoutSeconds`` between ``watch_seconds`` and twice that; BOOKMARK lines move the
  resourceVersion on; a normal end of the stream re-watches from the last one seen;
- ``410 Expired``, in-stream (an ERROR line holding a Status of code 410) or as the HTTP status,
  relists; any other ERROR line or a lost connection re-watches after a backoff.

Watch lines of objects the store already holds (``MODIFIED``, ``DELETED``) can be read without
decoding them whole: with a ``LiteWatch``, such a line is decoded into a small struct of the few
fields that change (msgspec skips the rest unread: a pod's managedFields and spec are most of
its bytes), and ``refresh(lite, old)`` makes the new kept value from it and the old one (or says
``FULL``: decode this one whole). A ``DELETED`` line of an object not kept (a pod the store let go
when it ended) is read lightly too: only its resourceVersion counts. Every other line is
decoded whole.

``synced`` is set after the first list was applied. ``relists`` counts lists after the first.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

import orjson

import msgspec

from si_client import Backoff
from k8s_shim.kube.kubeclient import ApiError, KubeClient

__all__ = ["Informer", "LiteWatch", "uid_key", "name_key", "FULL"]

log = logging.getLogger(__name__)
T = TypeVar("T")

PAGE_SIZE = 500


def uid_key(raw: dict) -> str:
    return raw["metadata"]["uid"]


def name_key(raw: dict) -> str:
    meta = raw["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else meta["name"]


FULL = object()  # a LiteWatch refresh's answer: decode this line whole

_MODIFIED, _DELETED = b'{"type":"MODIFIED"', b'{"type":"DELETED"'


@dataclass(frozen=True, slots=True)
class LiteWatch(Generic[T]):
    """How to read a watch line of a known object cheaply (see module doc). ``decoder`` decodes a
    line into a struct with ``type`` and ``object``; ``key(object)`` is the store's key;
    ``version(object)`` its resourceVersion; ``refresh(object, old)`` the new kept value, None
    (drop it), or ``FULL``."""

    decoder: msgspec.json.Decoder
    key: Callable[[Any], str]
    version: Callable[[Any], str]
    refresh: Callable[[Any, T], Any]


class _Relist(Exception):
    """The watch cannot go on from its resourceVersion: list again."""


class Informer(Generic[T]):
    def __init__(self, client: KubeClient, path: str, decode: Callable[[dict, T | None], T | None],
                 on_change: Callable[[T | None, T | None], None], *, query: dict[str, str] | None = None,
                 key: Callable[[dict], str] = uid_key, name: str = "", watch_seconds: int = 300,
                 backoff: Backoff | None = None, lite: LiteWatch | None = None) -> None:
        self.client, self.path, self.decode, self.on_change = client, path, decode, on_change
        self.query = dict(query or {})
        self.key = key
        self.name = name or path
        self.watch_seconds = watch_seconds
        self.backoff = backoff or Backoff(base=0.2, cap=10.0)
        self.lite = lite
        self.store: dict[str, T] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.relists = 0
        self.watches = 0

    async def run(self) -> None:
        """Keep the store current until cancelled."""
        failures = 0
        while True:
            try:
                await self._list()
                failures = 0
                while True:
                    await self._watch_once()
                    failures = 0
            except _Relist as why:
                log.info("informer %s: relisting (%s)", self.name, why)
                self.relists += 1
            except ApiError as exc:
                failures += 1
                delay = exc.retry_after or self.backoff.delay(failures)
                log.warning("informer %s: %s; listing again in %.1fs", self.name, exc, delay)
                self.relists += 1
                await asyncio.sleep(delay)

    # ------------------------------------------------------------------ list
    async def _list(self) -> None:
        items: list[dict] = []
        query = dict(self.query, limit=str(PAGE_SIZE))
        while True:
            try:
                page = await self.client.get(self.path, query)
            except ApiError as exc:
                if exc.status == 410 and "continue" in query:  # the continue token expired: start over
                    items, query = [], dict(self.query, limit=str(PAGE_SIZE))
                    continue
                raise
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                self.resource_version = meta.get("resourceVersion", "")
                break
            query = dict(self.query, limit=str(PAGE_SIZE), **{"continue": token})
        self._replace(items)
        self.synced.set()

    def _replace(self, items: list[dict]) -> None:
        old_store, new_store = self.store, {}
        changes: list[tuple[Any, Any]] = []
        listed: set[str] = set()
        for raw in items:
            try:
                key = self.key(raw)
            except (KeyError, TypeError):
                log.warning("informer %s: an item of the list without metadata ignored", self.name)
                continue
            listed.add(key)
            old = old_store.get(key)
            try:
                new = self.decode(raw, old)
            except Exception:
                log.exception("informer %s: cannot read %s; kept the previous state", self.name, key)
                if old is not None:
                    new_store[key] = old
                continue
            if new is not None:
                new_store[key] = new
            if old is not None or new is not None:
                changes.append((old, new))
        changes.extend((old, None) for key, old in old_store.items() if key not in listed)
        self.store = new_store
        for old, new in changes:
            self._notify(old, new)

    # ------------------------------------------------------------------ watch
    async def _watch_once(self) -> None:
        timeout = random.randint(self.watch_seconds, 2 * self.watch_seconds)
        query = dict(self.query, resourceVersion=self.resource_version, allowWatchBookmarks="true")
        self.watches += 1
        try:
            async for batch in self.client.watch_batches(self.path, query, timeout):
                for line in batch:
                    if self.lite is not None and self._apply_lite(line):
                        continue
                    try:
                        event = orjson.loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise ApiError("GET", self.path, 0, message=f"watch line is not JSON: {exc}") from None
                    self._apply(event)
        except ApiError as exc:
            if exc.status == 410:
                raise _Relist(f"HTTP 410 on watch from resourceVersion {self.resource_version}") from None
            if exc.status == 0:  # the connection dropped: watch again from where we are
                log.info("informer %s: %s; watching again", self.name, exc)
                await asyncio.sleep(self.backoff.delay(0))
                return
            raise

    def _apply_lite(self, line: bytes) -> bool:
        """Apply a MODIFIED or DELETED line of a known object read lightly; False when the line
        must be decoded whole."""
        if line.startswith(_MODIFIED):
            deleted = False
        elif line.startswith(_DELETED):
            deleted = True
        else:
            return False
        lite = self.lite
        try:
            obj = lite.decoder.decode(line).object
        except msgspec.DecodeError:
            return False  # the whole decode says what is wrong
        key = lite.key(obj)
        old = self.store.get(key)
        if old is None:
            if not deleted:
                return False
            new = None  # an object not kept (or already gone): only its resourceVersion counts
        elif deleted:
            new = None
        else:
            try:
                new = lite.refresh(obj, old)
            except Exception:
                log.exception("informer %s: cannot read %s; kept the previous state", self.name, key)
                return True
            if new is FULL:
                return False
        rv = lite.version(obj)
        if rv:
            self.resource_version = rv
        if old is None:
            return True
        if new is None:
            del self.store[key]
        else:
            self.store[key] = new
        try:
            self.on_change(old, new)
        except Exception:
            log.exception("informer %s: handler failed", self.name)
        return True

    def _apply(self, line: dict) -> None:
        kind, obj = line.get("type"), line.get("object") or {}
        if kind == "BOOKMARK":
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = rv
            return
        if kind == "ERROR":
            code = obj.get("code")
            message = obj.get("message", "")
            if code == 410:
                raise _Relist(f"watch expired: {message}")
            raise ApiError("GET", self.path, int(code or 0) or 500, str(obj.get("reason", "")),
                           f"watch ERROR: {message}")
        try:
            key = self.key(obj)
        except (KeyError, TypeError):
            log.warning("informer %s: a %s line without metadata ignored", self.name, kind)
            return
        rv = obj["metadata"].get("resourceVersion")
        if rv:
            self.resource_version = rv
        old = self.store.get(key)
        if kind == "DELETED":
            if old is not None:
                del self.store[key]
                self._notify(old, None)
            return
        if kind not in ("ADDED", "MODIFIED"):
            log.warning("informer %s: unknown watch event type %r ignored", self.name, kind)
            return
        try:
            new = self.decode(obj, old)
        except Exception:
            log.exception("informer %s: cannot read %s %s; kept the previous state", self.name, kind, key)
            return
        if new is None:
            if old is not None:
                del self.store[key]
                self._notify(old, None)
            return
        self.store[key] = new
        self._notify(old, new)

    def _notify(self, old: Any, new: Any) -> None:
        try:
            self.on_change(old, new)
        except Exception:
            log.exception("informer %s: handler failed", self.name)
