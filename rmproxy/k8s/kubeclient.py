"""A thin async adapter over the Kubernetes REST API: the few calls the shim makes, raw JSON.

Requests go over aiohttp; bodies are decoded with orjson into plain dicts (no typed models: a
typed decode of a Pod costs more than the shim may spend on it). Errors arrive as ``ApiError``
built from the server's ``Status`` body (``status``, ``reason``, ``message``, ``details.kind``),
or with status 0 when the server could not be reached. The calls:

- ``get`` / ``list`` (one page) of any path; ``watch`` yields a watch's lines as dicts until the
  server ends the stream;
- ``bind``: ``POST pods/{name}/binding``; a real server answers 201 with a ``Status``, which is
  not decoded as a Binding; the binding names the pod's uid, so a pod recreated under the same
  name is never bound by mistake (409);
- ``patch_status`` (strategic merge of a pod's status), ``create_event`` (events.k8s.io/v1),
  ``delete``, ``select_node`` (a WaitForFirstConsumer claim's node annotation).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator
from urllib.parse import quote

import aiohttp
import orjson

from rmproxy.k8s.kubeconfig import KubeConfig

__all__ = ["ApiError", "KubeClient", "JSON", "STRATEGIC_MERGE", "MERGE"]

log = logging.getLogger(__name__)

JSON = "application/json"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
REQUEST_TIMEOUT = 30.0
WATCH_READ_SLACK = 30.0  # a watch may stay quiet up to its timeoutSeconds; then this much longer
USER_AGENT = "korral-k8s-shim/0.1"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


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
        try:
            doc = orjson.loads(body)
            if isinstance(doc, dict):
                reason, message = str(doc.get("reason", "")), str(doc.get("message", ""))
                details = doc.get("details")
                kind = str(details.get("kind", "")) if isinstance(details, dict) else ""
        except orjson.JSONDecodeError:
            message = body[:500].decode("utf-8", "replace").strip()
        after = None
        if retry_after:
            try:
                after = float(retry_after)
            except ValueError:
                pass
        return cls(method, path, status, reason, message, kind, after)


def pod_path(namespace: str, name: str = "", sub: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
    if name:
        path += f"/{quote(name, safe='')}"
    return f"{path}/{sub}" if sub else path


class KubeClient:
    """One API server connection pool. ``start`` before use (on the running loop), ``close`` after."""

    def __init__(self, config: KubeConfig, *, connections: int = 64) -> None:
        self.config = config
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=self._connections, ssl=self.config.ssl if self.config.ssl else False)
        self._session = aiohttp.ClientSession(self.config.server, connector=connector,
                                              headers={"User-Agent": USER_AGENT, "Accept": JSON})

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> "KubeClient":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------------ generic
    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {}
        auth = self.config.auth_header()
        if auth:
            headers["Authorization"] = auth
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                      body: Any = None, content_type: str = JSON, timeout: float = REQUEST_TIMEOUT) -> Any:
        """The decoded JSON answer of a request (None for an empty body); ``ApiError`` otherwise."""
        assert self._session is not None, "KubeClient.start() first"
        data = orjson.dumps(body) if body is not None else None
        try:
            async with self._session.request(
                    method, path, params=query, data=data, headers=self._headers(content_type if data else None),
                    timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise ApiError.from_response(method, path, resp.status, raw, resp.headers.get("Retry-After"))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise ApiError(method, path, 0, message=str(exc) or type(exc).__name__) from None
        return orjson.loads(raw) if raw else None

    async def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        return await self.request("GET", path, query=query)

    async def watch(self, path: str, query: dict[str, str], timeout_seconds: int) -> AsyncIterator[dict]:
        """The lines of a watch (``watch=true`` added) as dicts, until the server ends the stream.
        An HTTP error raises ``ApiError`` (410 included); a connection lost midway ends the
        iteration with ``ApiError`` status 0."""
        assert self._session is not None, "KubeClient.start() first"
        params = dict(query, watch="true", timeoutSeconds=str(timeout_seconds))
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=REQUEST_TIMEOUT,
                                        sock_read=timeout_seconds + WATCH_READ_SLACK)
        try:
            async with self._session.get(path, params=params, headers=self._headers(), timeout=timeout) as resp:
                if resp.status >= 400:
                    raise ApiError.from_response("GET", path, resp.status, await resp.read(),
                                                 resp.headers.get("Retry-After"))
                pending = b""
                async for chunk in resp.content.iter_any():
                    pending += chunk
                    if b"\n" not in chunk:
                        continue
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield orjson.loads(line)
                if pending.strip():
                    yield orjson.loads(pending)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise ApiError("GET", path, 0, message=f"watch ended: {exc or type(exc).__name__}") from None
        except orjson.JSONDecodeError as exc:
            raise ApiError("GET", path, 0, message=f"watch line is not JSON: {exc}") from None

    # ------------------------------------------------------------------ the shim's calls
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind the pod (of this uid) to ``node``. A 201 ``Status`` is success."""
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        await self.request("POST", pod_path(namespace, name, "binding"), body=body)

    async def patch_status(self, namespace: str, name: str, patch: dict) -> Any:
        return await self.request("PATCH", pod_path(namespace, name, "status"), body=patch,
                                  content_type=STRATEGIC_MERGE)

    async def select_node(self, namespace: str, claim: str, node: str) -> Any:
        """Give a WaitForFirstConsumer claim its node (``volume.kubernetes.io/selected-node``)."""
        return await self.request(
            "PATCH", f"/api/v1/namespaces/{quote(namespace, safe='')}/persistentvolumeclaims/{quote(claim, safe='')}",
            body={"metadata": {"annotations": {SELECTED_NODE: node}}}, content_type=MERGE)

    async def delete(self, path: str, body: dict | None = None) -> Any:
        return await self.request("DELETE", path, body=body)

    async def create_event(self, namespace: str, event: dict) -> Any:
        return await self.request("POST", f"/apis/events.k8s.io/v1/namespaces/{quote(namespace, safe='')}/events",
                                  body=event)
