"""A thin async adapter over the Kubernetes REST API: the few calls the shim makes, raw JSON.

Requests go over ``k8s_shim.kube.http`` (kept-alive HTTP/1.1 connections, one pre-assembled
buffer per request); bodies are decoded with orjson into plain dicts (no typed models: a typed
decode of a Pod costs more than the shim may spend on it), and the answers of the hot calls
(binding, events, status patches) are not decoded at all unless they are errors. Errors arrive as
``ApiError`` built from the server's ``Status`` body (``status``, ``reason``, ``message``,
``details.kind``), or with status 0 when the server could not be reached. The calls:

- ``get`` / ``list`` (one page) of any path; ``watch_batches`` yields a watch's lines as raw
  bytes, in batches as they arrive, until the server ends the stream (``watch``: as dicts);
- ``submit_bind``: ``POST pods/{name}/binding``; a real server answers 201 with a ``Status``,
  which is not decoded as a Binding; the binding names the pod's uid, so a pod recreated under
  the same name is never bound by mistake (409);
- ``patch_status`` (strategic merge of a pod's status), ``submit_event`` (events.k8s.io/v1) and
  ``patch_event_series`` (an event series' count), ``delete``, ``patch_claim`` / ``patch_volume`` (merge patches of a claim and a persistent
  volume: the writes before a pod's binding, ``writes.volume_binding``).

The ``submit_*`` calls are the hot ones (a binding and an event or two per pod): they take a
callback, ``done(None)`` or ``done(ApiError)``, instead of being awaited, so that each costs no
task and no chain of coroutines (``submit``; ``Pool.submit``).

Flow control (``k8s_shim.kube.flow``): every write (POST, PUT, PATCH, DELETE) first takes a token
of a ``TokenBucket`` (``set_rate``: ``kubernetes.qps`` / ``kubernetes.burst``). Events
(``event=True``) have a bucket of their own with the same limits, as kube-scheduler gives its event
recorder a client of its own: a stream of bindings at the limit leaves the events their share,
and events never delay a binding. (YuniKorn's shim shares one limit between both; at 1,000 pods/s
and its default qps of 1,000 the bindings take every token and the events are dropped.) Any request answered 429 Too Many Requests (as
API Priority and Fairness answers: ``Retry-After`` seconds, a plain-text body), or 5xx with a
``Retry-After``, is sent again after that delay, up to ``flow.MAX_RETRIES`` times, before its
caller hears of it; a watch answered so is opened again. ``counters()`` counts them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, AsyncIterator, Callable
from urllib.parse import quote, urlencode

import orjson

from k8s_shim.kube.flow import TokenBucket, retry_delay
from k8s_shim.kube.http import HttpError, Pool, Response
from k8s_shim.kube.kubeconfig import KubeConfig

__all__ = ["ApiError", "KubeClient", "JSON", "STRATEGIC_MERGE", "MERGE"]

log = logging.getLogger(__name__)

JSON = "application/json"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
REQUEST_TIMEOUT = 30.0
WATCH_READ_SLACK = 30.0  # a watch may stay quiet up to its timeoutSeconds; then this much longer
USER_AGENT = "korral-k8s-shim/0.1"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_QPS = DEFAULT_BURST = 1000  # YuniKorn's kubernetes.qps and kubernetes.burst


class ApiError(Exception):
    """A request the API server refused (or that did not reach it: ``status`` 0)."""

    def __init__(self, method: str, path: str, status: int, reason: str = "", message: str = "",
                 details_kind: str = "", retry_after: float | None = None) -> None:
        self.method, self.path, self.status = method, path, status
        self.reason, self.message, self.details_kind = reason, message, details_kind
        self.retry_after = retry_after
        what = f"HTTP {status}" if status else "no answer"
        super().__init__(f"{method} {path}: {what}{' ' + reason if reason else ''}: {message}")

    @property
    def transient(self) -> bool:
        """Worth retrying as is: no answer, throttled, or the server's own trouble. A 500 from a
        bad request (v1.24 answers an invalid binding target with 500 and no reason) is not."""
        if self.status in (0, 429, 502, 503, 504):
            return True
        return self.status == 500 and self.reason in ("InternalError", "ServerTimeout", "Timeout")

    @classmethod
    def from_response(cls, method: str, path: str, status: int, body: bytes,
                      retry_after: str | None = None) -> "ApiError":
        reason = message = kind = ""
        retry_seconds = None
        try:
            doc = orjson.loads(body)
            if isinstance(doc, dict):
                reason, message = str(doc.get("reason", "")), str(doc.get("message", ""))
                details = doc.get("details")
                if isinstance(details, dict):
                    kind, retry_seconds = str(details.get("kind", "")), details.get("retryAfterSeconds")
        except orjson.JSONDecodeError:  # APF's 429 is plain text
            message = body[:500].decode("utf-8", "replace").strip()
        if status == 429 and not reason:  # as client-go names a 429 that is not a Status
            reason = "TooManyRequests"
        after = None
        if retry_after:
            try:
                after = float(retry_after.strip())
            except ValueError:
                pass  # an HTTP date: never sent by an API server
        if after is None and isinstance(retry_seconds, (int, float)) and retry_seconds > 0:
            after = float(retry_seconds)
        return cls(method, path, status, reason, message, kind, after)


_UNQUOTED = re.compile(r"[A-Za-z0-9_.~-]*").fullmatch  # what quote(..., safe="") leaves as it is


def segment(name: str) -> str:
    """``name`` as one segment of a path: quoted, unless it needs no quoting (every valid
    Kubernetes name: quoting those cost more than the rest of building a request)."""
    return name if _UNQUOTED(name) else quote(name, safe="")


def pod_path(namespace: str, name: str = "", sub: str = "") -> str:
    path = f"/api/v1/namespaces/{segment(namespace)}/pods"
    if name:
        path += f"/{segment(name)}"
    return f"{path}/{sub}" if sub else path


def claim_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{segment(namespace)}/resourceclaims/{segment(name)}"
    return f"{path}/{sub}" if sub else path


def _failed(method: str, path: str, resp: Response | None, exc: HttpError | None) -> ApiError:
    """The ``ApiError`` of a refused request (``resp``) or of one that got no answer (``exc``)."""
    path = path.split("?", 1)[0]
    if resp is None:
        return ApiError(method, path, 0, message=str(exc))
    return ApiError.from_response(method, path, resp.status, resp.body, resp.headers.get("retry-after"))


def _target(path: str, query: dict[str, str] | None) -> str:
    return f"{path}?{urlencode(query, quote_via=quote, safe='')}" if query else path


class KubeClient:
    """One API server connection pool. ``start`` before use (on the running loop), ``close`` after."""

    def __init__(self, config: KubeConfig, *, connections: int = 64, qps: float = DEFAULT_QPS,
                 burst: int = DEFAULT_BURST) -> None:
        self.config = config
        self._connections = connections
        self.pool: Pool | None = None
        self.bucket = TokenBucket(qps, burst)  # the scheduling writes
        self.event_bucket = TokenBucket(qps, burst)  # events and their series' patches
        self.throttled = 0  # answers 429 Too Many Requests (watches included)
        self.retried = 0  # requests sent again after a 429 or a 5xx with Retry-After
        self.gave_up = 0  # requests still refused so after MAX_RETRIES: their caller heard of it

    def set_rate(self, qps: float, burst: int) -> None:
        """The writes' limits (``kubernetes.qps``, ``kubernetes.burst``; qps <= 0: none), the same
        for the scheduling writes and for the events, each their own."""
        self.bucket.set_rate(qps, burst)
        self.event_bucket.set_rate(qps, burst)

    def counters(self) -> dict[str, int]:
        """Flow control's counts, for the state dump and the SIGUSR1 line."""
        return {"throttled": self.throttled, "retried": self.retried, "gaveUp": self.gave_up,
                "waitedForToken": self.bucket.waited, "waitingForToken": self.bucket.queued,
                "eventsWaitedForToken": self.event_bucket.waited, "eventsWaitingForToken": self.event_bucket.queued}

    def _retry_after(self, error: ApiError, attempt: int) -> float | None:
        """The delay before sending ``error``'s request again (counted), or None."""
        if error.status == 429:
            self.throttled += 1
        delay = retry_delay(error.status, error.retry_after, attempt)
        if delay is None:
            if attempt and (error.status == 429 or error.retry_after is not None):
                self.gave_up += 1
            return None
        self.retried += 1
        return delay

    async def start(self) -> None:
        self.pool = Pool(self.config.server, ssl=self.config.ssl, limit=self._connections,
                         headers={"User-Agent": USER_AGENT, "Accept": JSON}, auth=self.config.auth_header)

    async def close(self) -> None:
        self.bucket.close()
        self.event_bucket.close()
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    async def __aenter__(self) -> "KubeClient":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ generic
    async def send(self, method: str, path: str, data: bytes | None = None, content_type: str = JSON,
                   timeout: float = REQUEST_TIMEOUT, event: bool = False) -> bytes:
        """The raw answer of a request that succeeded; ``ApiError`` otherwise (after the retries of
        a throttled request; a write waits for its token first)."""
        assert self.pool is not None, "KubeClient.start() first"
        attempt = 0
        while True:
            if method in WRITES:
                token = asyncio.get_running_loop().create_future()
                (self.event_bucket if event else self.bucket).take(lambda: token.done() or token.set_result(None))
                await token
            try:
                resp = await self.pool.request(method, path, data, content_type if data is not None else "", timeout)
            except HttpError as exc:
                raise _failed(method, path, None, exc) from None
            if resp.status < 400:
                return resp.body
            error = _failed(method, path, resp, None)
            delay = self._retry_after(error, attempt)
            if delay is None:
                raise error
            attempt += 1
            await asyncio.sleep(delay)

    def submit(self, method: str, path: str, data: bytes | None, content_type: str,
               done: Callable[[ApiError | None], None], event: bool = False) -> None:
        """A request whose answer is not read: ``done(None)`` when it succeeded, ``done(ApiError)``
        otherwise (after the retries of a throttled request; a write waits for its token first);
        no task, no coroutine (``Pool.submit``)."""
        assert self.pool is not None, "KubeClient.start() first"
        pool = self.pool
        kind = content_type if data is not None else ""
        attempt = 0

        def send() -> None:
            if self.pool is not pool:  # closed while the request waited
                done(ApiError(method, path, 0, message="the client is closed"))
                return
            pool.submit(method, path, data, kind, REQUEST_TIMEOUT, answered)

        def go() -> None:
            if method in WRITES:
                (self.event_bucket if event else self.bucket).take(send)
            else:
                send()

        def answered(resp: Response | None, exc: HttpError | None) -> None:
            nonlocal attempt
            if exc is None and resp.status < 400:
                done(None)
                return
            error = _failed(method, path, resp, exc)
            delay = self._retry_after(error, attempt) if exc is None else None
            if delay is None:
                done(error)
                return
            attempt += 1
            asyncio.get_running_loop().call_later(delay, go)
        go()

    async def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                      body: Any = None, content_type: str = JSON, timeout: float = REQUEST_TIMEOUT) -> Any:
        """The decoded JSON answer of a request (None for an empty body); ``ApiError`` otherwise."""
        raw = await self.send(method, _target(path, query), orjson.dumps(body) if body is not None else None,
                              content_type, timeout)
        return orjson.loads(raw) if raw else None

    async def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        return await self.request("GET", path, query=query)

    async def watch_batches(self, path: str, query: dict[str, str], timeout_seconds: int) -> AsyncIterator[list[bytes]]:
        """The lines of a watch (``watch=true`` added) as raw bytes, in batches as they arrive,
        until the server ends the stream. An HTTP error raises ``ApiError`` (410 included); a
        connection lost midway ends the iteration with ``ApiError`` status 0."""
        assert self.pool is not None, "KubeClient.start() first"
        target = _target(path, dict(query, watch="true", timeoutSeconds=str(timeout_seconds)))
        attempt = 0
        while True:
            try:
                stream = await self.pool.stream(target, timeout_seconds + WATCH_READ_SLACK, REQUEST_TIMEOUT)
            except HttpError as exc:
                raise ApiError("GET", path, 0, message=f"watch ended: {exc}") from None
            if stream.status < 400:
                break
            try:
                error = ApiError.from_response("GET", path, stream.status, await stream.read(),
                                               stream.headers.get("retry-after"))
            except HttpError as exc:
                raise ApiError("GET", path, 0, message=f"watch ended: {exc}") from None
            finally:
                stream.close()
            delay = self._retry_after(error, attempt)  # throttled: the same watch, later
            if delay is None:
                raise error
            attempt += 1
            await asyncio.sleep(delay)
        try:
            async for batch in stream.batches():
                yield batch
        except HttpError as exc:
            raise ApiError("GET", path, 0, message=f"watch ended: {exc}") from None
        finally:
            stream.close()

    async def watch(self, path: str, query: dict[str, str], timeout_seconds: int) -> AsyncIterator[dict]:
        """``watch_batches`` as dicts, one per line."""
        async for batch in self.watch_batches(path, query, timeout_seconds):
            for line in batch:
                try:
                    yield orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise ApiError("GET", path, 0, message=f"watch line is not JSON: {exc}") from None

    # ------------------------------------------------------------------ the shim's calls
    def submit_bind(self, namespace: str, name: str, uid: str, node: str, done: Callable[[ApiError | None], None]) -> None:
        """Bind the pod (of this uid) to ``node``; ``done(None)`` when bound (a real server answers
        201 with a ``Status``, not decoded), ``done(ApiError)`` if not (``submit``)."""
        body = orjson.dumps({"apiVersion": "v1", "kind": "Binding",
                             "metadata": {"name": name, "namespace": namespace, "uid": uid},
                             "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
        self.submit("POST", pod_path(namespace, name, "binding"), body, JSON, done)

    async def create_pod(self, namespace: str, pod: dict) -> None:
        """Create a pod (a gang's placeholder); the answer is not decoded."""
        await self.send("POST", pod_path(namespace), orjson.dumps(pod))

    async def patch_status(self, namespace: str, name: str, patch: dict) -> None:
        await self.send("PATCH", pod_path(namespace, name, "status"), orjson.dumps(patch), STRATEGIC_MERGE)

    async def patch_claim(self, namespace: str, name: str, patch: dict) -> None:
        """Merge-patch a volume claim (its selected node before its pod's binding)."""
        await self.send("PATCH", f"/api/v1/namespaces/{segment(namespace)}/persistentvolumeclaims/{segment(name)}",
                        orjson.dumps(patch), MERGE)

    async def patch_volume(self, name: str, patch: dict) -> None:
        """Merge-patch a persistent volume (its claimRef: a pre-bind before its pod's binding)."""
        await self.send("PATCH", f"/api/v1/persistentvolumes/{segment(name)}", orjson.dumps(patch), MERGE)

    async def patch_pod_group_status(self, namespace: str, name: str, patch: dict) -> None:
        """Merge-patch a PodGroup's status (scheduling.k8s.io/v1alpha2: its PodGroupScheduled condition)."""
        await self.send("PATCH", f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{segment(namespace)}/podgroups/"
                        f"{segment(name)}/status", orjson.dumps(patch), MERGE)

    async def get_pod(self, namespace: str, name: str) -> dict:
        """One pod (a DRA claim's reservation for a pod the informer does not show)."""
        return await self.get(pod_path(namespace, name))

    async def get_claim(self, namespace: str, name: str) -> dict:
        """A DRA ResourceClaim (resource.k8s.io/v1)."""
        return await self.get(claim_path(namespace, name))

    async def update_claim(self, namespace: str, name: str, claim: dict) -> dict:
        """PUT a ResourceClaim (its finalizers), with the resourceVersion it carries: 409 if stale."""
        return await self.request("PUT", claim_path(namespace, name), body=claim)

    async def update_claim_status(self, namespace: str, name: str, claim: dict) -> dict:
        """PUT a ResourceClaim's status (allocation, reservedFor), with its resourceVersion."""
        return await self.request("PUT", claim_path(namespace, name, "status"), body=claim)

    async def delete(self, path: str, body: dict | None = None) -> Any:
        return await self.request("DELETE", path, body=body)

    async def patch_event_series(self, namespace: str, name: str, count: int, last_observed: str) -> None:
        """Bring an event's ``series`` (count, lastObservedTime) up to date (merge patch)."""
        await self.send("PATCH", f"/apis/events.k8s.io/v1/namespaces/{segment(namespace)}/events/{segment(name)}",
                        orjson.dumps({"series": {"count": count, "lastObservedTime": last_observed}}), MERGE,
                        event=True)

    def submit_event(self, namespace: str, event: bytes, done: Callable[[ApiError | None], None]) -> None:
        """POST an event (its JSON); ``done`` as ``submit_bind``'s (the answer is not decoded). It
        takes its token from the events' own bucket."""
        self.submit("POST", f"/apis/events.k8s.io/v1/namespaces/{segment(namespace)}/events", event, JSON, done,
                    event=True)
