"""A small client of a REST API that speaks YuniKorn's ``/ws/v1`` (Korral's or YuniKorn's own).

Used by the CLI's REST commands (``korral queues``, ``dump``, ``explain``, ``config``) and by the
simulator.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["RestClient", "RestError", "path_part", "TIMEOUT"]

TIMEOUT = 30.0


class RestError(Exception):
    """The REST API could not be reached or answered an error; the message says which."""


class RestClient:
    """JSON from a Korral (or YuniKorn) REST address ``host:port`` (``https://host:port`` for
    HTTPS, with ``ssl_context``); ``token`` is sent as ``Authorization: Bearer`` (the admin endpoint)."""

    def __init__(self, address: str, timeout: float = TIMEOUT, token: str | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.base = address if address.startswith("http") else f"{'https' if ssl_context else 'http'}://{address}"
        self.timeout = timeout
        self.token = token
        self.ssl_context = ssl_context

    def get(self, path: str, **params: str) -> Any:
        return _json(self.get_raw(path, **params), "GET", path)

    def get_raw(self, path: str, **params: str) -> bytes:
        """The body of a 200 answer as bytes; RestError with the API's message otherwise."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v})
        return self.send("GET", path + (f"?{query}" if query else ""))

    def send_json(self, method: str, path: str, data: bytes | None = None,
                  headers: dict[str, str] | None = None) -> Any:
        return _json(self.send(method, path, data, headers), method, path)

    def send(self, method: str, path: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> bytes:
        """The body of a 2xx answer; RestError naming the method, path, status and the API's message."""
        head = {"Accept": "application/json", **(headers or {})}
        if self.token:
            head["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=head)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ssl_context) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            try:
                body = json.load(exc)
                msg = body.get("message") or str(body)
                desc = body.get("description")
                if desc and desc != msg:
                    msg = f"{msg} ({desc})"
            except (ValueError, AttributeError):
                msg = exc.reason
            raise RestError(f"{method} {path.split('?', 1)[0]}: {exc.code} {msg}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RestError(f"cannot reach the REST API at {self.base}: {reason}") from None

    def partitions(self, wanted: str | None) -> list[dict]:
        parts = self.get("/ws/v1/partitions")
        if not wanted:
            return parts
        rm_id, name = None, wanted
        if wanted.startswith("[") and "]" in wanted:
            rm_id, name = wanted[1:].split("]", 1)
        found = [p for p in parts if p["name"] == name and (rm_id is None or p.get("rmID") == rm_id)]
        if not found:
            known = ", ".join(f"[{p.get('rmID')}]{p['name']}" for p in parts) or "none"
            raise RestError(f"partition {wanted!r} not found (partitions: {known})")
        return found[:1] if rm_id is None else found


def _json(raw: bytes, method: str, path: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise RestError(f"{method} {path.split('?', 1)[0]}: the answer is not JSON: {exc}") from None


def path_part(s: str) -> str:
    """One path segment of a URL, quoted (a queue, app or key may hold any character)."""
    return urllib.parse.quote(s, safe="")
