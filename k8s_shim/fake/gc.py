"""The garbage collector of kube-controller-manager, for owner references between any objects
the double stores (the shim's placeholder pods rely on it; files 30 and 31).

- Background (the default): once an owner is gone, each dependent is deleted as a plain DELETE
  would (a bound pod becomes Terminating and waits for its kubelet).
- Foreground: the owner waits with the ``foregroundDeletion`` finalizer while its dependents are
  deleted; when no dependent with ``blockOwnerDeletion: true`` is left, the finalizer's removal
  deletes the owner.
- Orphan: the dependents lose their reference to the owner, then the ``orphan`` finalizer goes.
- A dependent whose owner does not exist (no object has that uid) is deleted too.

It learns every write through the store's listeners and acts on the event loop right after, never
inside the write that told it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from k8s_shim.fake.api import Api, DeleteOptions
from k8s_shim.fake.errors import ApiError
from k8s_shim.fake.kinds import Kind
from k8s_shim.fake.store import Event

__all__ = ["GarbageCollector"]

log = logging.getLogger("korral.k8s.fake.gc")


class GarbageCollector:
    def __init__(self, api: Api):
        self.api = api
        self.kinds: dict[str, Kind] = {}
        for kind in api.kinds:
            if not kind.view_of:
                self.kinds[api.bucket_name(kind)] = kind
        self.where: dict[str, tuple[str, str]] = {}  # uid -> (bucket, key)
        self.dependents: dict[str, set[tuple[str, str]]] = {}  # owner uid -> {(bucket, key)}
        self.owners_of: dict[tuple[str, str], tuple[str, ...]] = {}
        self.pending: set[tuple[str, str, str]] = set()  # (action, bucket, key) queued for the loop
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._running: asyncio.Event | None = None  # created in start(), on the loop
        self.busy = False
        for bucket in self.kinds:
            for entry in api.store.entries(bucket):
                self._index(bucket, entry.key, entry.uid, entry.decode())
            api.store.listen(bucket, self._make_listener(bucket))

    def start(self) -> None:
        self._running = asyncio.Event()
        self._running.set()
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="k8s-fake-gc")
        for owner_uid in list(self.dependents):
            if owner_uid not in self.where:
                for dep in list(self.dependents.get(owner_uid, ())):
                    self._enqueue("orphaned", *dep)

    def pause(self) -> None:
        """Hold the collector's work (tests that need the moment before it acts)."""
        assert self._running is not None
        self._running.clear()

    def resume(self) -> None:
        assert self._running is not None
        self._running.set()

    def idle(self) -> bool:
        """Nothing queued and nothing being done."""
        return not self.busy and (self._queue is None or self._queue.empty())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    # -- the index ---------------------------------------------------------------------------

    def _index(self, bucket: str, key: str, uid: str, obj: dict[str, Any] | None) -> tuple[str, ...]:
        ref = (bucket, key)
        for owner in self.owners_of.pop(ref, ()):
            deps = self.dependents.get(owner)
            if deps is not None:
                deps.discard(ref)
                if not deps:
                    del self.dependents[owner]
        if obj is None:
            self.where.pop(uid, None)
            return ()
        self.where[uid] = ref
        owners = tuple(r.get("uid", "") for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid"))
        if owners:
            self.owners_of[ref] = owners
            for owner in owners:
                self.dependents.setdefault(owner, set()).add(ref)
        return owners

    def _make_listener(self, bucket: str):
        def listener(event: Event) -> None:
            entry = event.new
            ref = (bucket, entry.key)
            if event.type == "DELETED":
                for owner in self.owners_of.get(ref, ()):  # a foreground owner may be waiting for it
                    if owner in self.where:
                        self._enqueue("owner", *self.where[owner])
                self._index(bucket, entry.key, entry.uid, None)
                for dep in sorted(self.dependents.get(entry.uid, ())):
                    self._enqueue("orphaned", *dep)
                return
            self.where[entry.uid] = ref
            has_refs = b'"ownerReferences"' in entry.raw
            had_refs = ref in self.owners_of
            deleting = b'"deletionTimestamp"' in entry.raw
            if not (has_refs or had_refs or deleting):
                return  # most writes: nothing the collector tracks changed
            obj = entry.decode()
            owners = self._index(bucket, entry.key, entry.uid, obj)
            if any(o not in self.where for o in owners):
                self._enqueue("orphaned", bucket, entry.key)
            fin = obj["metadata"].get("finalizers") or []
            if deleting and ("foregroundDeletion" in fin or "orphan" in fin):
                self._enqueue("owner", bucket, entry.key)
        return listener

    def _enqueue(self, action: str, bucket: str, key: str) -> None:
        item = (action, bucket, key)
        if item in self.pending or self._queue is None:
            if self._queue is None:
                self.pending.add(item)
            return
        self.pending.add(item)
        self._queue.put_nowait(item)

    # -- the work ----------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._queue is not None
        for item in list(self.pending):
            self._queue.put_nowait(item)
        while True:
            self.busy = False
            action, bucket, key = await self._queue.get()
            self.busy = True
            assert self._running is not None
            await self._running.wait()
            self.pending.discard((action, bucket, key))
            try:
                if action == "orphaned":
                    self._collect_dependent(bucket, key)
                else:
                    self._process_owner(bucket, key)
            except ApiError as exc:
                if exc.code != 404:
                    log.warning("garbage collector: %s %s: %s", bucket, key, exc)
            except Exception:  # noqa: BLE001 - one bad object must not stop the collector
                log.exception("garbage collector: %s %s", bucket, key)

    def _collect_dependent(self, bucket: str, key: str) -> None:
        """Delete a dependent all of whose owners are gone."""
        entry = self.api.store.get(bucket, key)
        if entry is None:
            return
        obj = entry.decode()
        refs = obj["metadata"].get("ownerReferences") or []
        if not refs or any(r.get("uid") in self.where for r in refs):
            return  # another owner still stands
        if obj["metadata"].get("deletionTimestamp"):
            return
        kind = self.kinds[bucket]
        self.api.delete(kind, entry.namespace, entry.name, DeleteOptions(propagation="Background"))

    def _process_owner(self, bucket: str, key: str) -> None:
        entry = self.api.store.get(bucket, key)
        if entry is None:
            return
        obj = entry.decode()
        fin = obj["metadata"].get("finalizers") or []
        kind = self.kinds[bucket]
        deps = sorted(d for d in self.dependents.get(entry.uid, ()) if self.api.store.get(*d) is not None)
        if "orphan" in fin:
            for dep_bucket, dep_key in deps:
                self._drop_reference(dep_bucket, dep_key, entry.uid)
            self.api.remove_finalizer(kind, obj, "orphan")
            return
        if "foregroundDeletion" not in fin:
            return
        blocking = False
        for dep_bucket, dep_key in deps:
            dep = self.api.store.get(dep_bucket, dep_key)
            if dep is None:
                continue
            dep_obj = dep.decode()
            ref = next((r for r in dep_obj["metadata"].get("ownerReferences") or [] if r.get("uid") == entry.uid), {})
            if ref.get("blockOwnerDeletion"):
                blocking = True
            if not dep_obj["metadata"].get("deletionTimestamp"):
                self.api.delete(self.kinds[dep_bucket], dep.namespace, dep.name, DeleteOptions())
        if blocking and any(self.api.store.get(*d) is not None and self._blocks(d, entry.uid) for d in deps):
            return  # the dependents' DELETED events bring this owner back here
        current = self.api.store.get(bucket, key)
        if current is not None:
            self.api.remove_finalizer(kind, current.decode(), "foregroundDeletion")

    def _blocks(self, dep: tuple[str, str], owner_uid: str) -> bool:
        entry = self.api.store.get(*dep)
        if entry is None:
            return False
        refs = entry.decode()["metadata"].get("ownerReferences") or []
        return any(r.get("uid") == owner_uid and r.get("blockOwnerDeletion") for r in refs)

    def _drop_reference(self, bucket: str, key: str, owner_uid: str) -> None:
        entry = self.api.store.get(bucket, key)
        if entry is None:
            return
        obj = entry.decode()
        refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
        kind = self.kinds[bucket]
        self.api.patch(kind, entry.namespace, entry.name, "merge",
                       {"metadata": {"ownerReferences": refs or None}}, manager="korral-fake-gc")
