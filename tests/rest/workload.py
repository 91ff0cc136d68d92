"""A running stack with a small known workload, and an HTTP helper, for REST and dashboard tests.

Workload (RM ``rm-rest``, registered with ``BUILD_INFO``; two partitions, each owned by its own worker):
- ``default``: queues root.a (guaranteed memory 400, max memory 1000) and root.b; nodes n1, n2
  (memory 1000, vcore 1000 each); app ``app-a1`` (user alice, groups [dev]) in root.a with two
  allocated asks of memory 100 and one ask too big to fit (stays pending); app ``app-b1``
  (user bob) in root.b with one allocation of memory 50.
- ``gpu``: node g1 (memory 500, vcore 100, gpu 4); app ``app-g1`` in root.default with one allocation.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path

from common.netutil import http_get_json
from tests.conftest import StackHandle, start_stack, stop_and_verify, wait_until
from tests.e2e.sirm import SIRM
from tests.queues_yaml import open_root, queues_yaml
from tests.si_builders import app, ask, node

__all__ = ["CONFIG", "BUILD_INFO", "Loaded", "Http", "start_loaded", "stop_loaded", "add_app_states", "http",
           "EventStreamClient"]

RM_ID = "rm-rest"
# what a shim declares about its build (YuniKorn's web UI shows both); a seed-era version
BUILD_INFO = {"buildVersion": "1.2.0", "buildDate": "2026-11-24T09:30:00+0000"}
CONFIG = queues_yaml(open_root("""
- name: a
  resources:
    guaranteed: {memory: 400}
    max: {memory: 1000}
  properties:
    application.sort.policy: fifo
- name: b
"""), open_root("""
- name: default
""", name="gpu"))


@dataclass
class Http:
    status: int
    headers: dict
    body: bytes

    def json(self):
        return json.loads(self.body)


class EventStreamClient:
    """A client of ``/ws/v1/events/stream`` reading one JSON line at a time (``timeout`` per line)."""

    def __init__(self, address: str, query: str = "", host: str | None = None, timeout: float = 15.0) -> None:
        name, port = address.rsplit(":", 1)
        self.conn = HTTPConnection(name, int(port), timeout=timeout)
        self.conn.putrequest("GET", "/ws/v1/events/stream" + query, skip_host=host is not None)
        if host is not None:
            self.conn.putheader("Host", host)
        self.conn.endheaders()
        self.resp = self.conn.getresponse()

    def line(self) -> dict:
        return json.loads(self.resp.readline())

    def until(self, predicate) -> dict:
        while True:  # each read is bounded by the socket timeout
            rec = self.line()
            if predicate(rec):
                return rec

    def body(self) -> dict:
        """The whole (error) answer, then closed."""
        try:
            return json.loads(self.resp.read())
        finally:
            self.close()

    def close(self) -> None:
        self.conn.close()


def http(base: str, path: str, method: str = "GET", data: bytes | None = None,
         headers: dict | None = None, timeout: float = 15.0) -> Http:
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Http(r.status, dict(r.headers), r.read())
    except urllib.error.HTTPError as exc:
        return Http(exc.code, dict(exc.headers), exc.read())


@dataclass
class Loaded:
    handle: StackHandle
    rm: SIRM
    base: str

    def get(self, path: str, **kw) -> Http:
        return http(self.base, path, **kw)


def _pending(handle: StackHandle, queue: str, app_id: str) -> list[str]:
    """Allocation keys of the pending asks of ``app_id`` in ``queue`` of partition default, per REST."""
    answer = http_get_json(f"http://{handle.rest_address}/ws/v1/partition/default/queue/{queue}/applications")
    apps = answer.body if answer.status == 200 and isinstance(answer.body, list) else []
    return [r["allocationKey"] for a in apps if a.get("applicationID") == app_id
            for r in a.get("requests", []) if r.get("pendingCount", 0) > 0]


def start_loaded(state_dir: Path, extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Loaded:
    """The stack of the module doc (``extra``: more ``korral up`` flags, ``env``: its environment), loaded."""
    handle = start_stack(state_dir, workers=3, extra=extra, env=env)
    try:
        rm = SIRM(handle.si_address, RM_ID)
        rm.register(CONFIG, build_info=BUILD_INFO)
        rm.open()
        # The three streams are independent: wait for each step before the next depends on it.
        rm.nodes(node("n1", memory=1000, vcore=1000), node("n2", memory=1000, vcore=1000),
                 node("g1", partition="gpu", memory=500, vcore=100, gpu=4))
        rm.wait_accepted("node", {"n1", "n2", "g1"}, 20)
        rm.apps(app("app-a1", "root.a", user="alice", groups=["dev"]), app("app-b1", "root.b", user="bob"),
                app("app-g1", "root.default", "gpu", user="carol"))
        rm.wait_accepted("application", {"app-a1", "app-b1", "app-g1"}, 20)
        asks = [ask("a1-k1", "app-a1", memory=100, vcore=10), ask("a1-k2", "app-a1", memory=100, vcore=10),
                ask("b1-k1", "app-b1", memory=50, vcore=5),
                ask("g1-k1", "app-g1", partition="gpu", memory=100, vcore=10, gpu=1)]
        rm.asks(*asks)
        rm.wait_allocated({a.allocationKey for a in asks}, 20)
        rm.asks(ask("a1-huge", "app-a1", memory=900, vcore=10))  # fits root.a's max? no: 200+900 > 1000
        # Nothing comes back for an ask that stays pending: wait until the worker holds it (the
        # tests explain it and list it), however long a loaded machine takes to get it there.
        wait_until(lambda: _pending(handle, "root.a", "app-a1") == ["a1-huge"], 20, "ask a1-huge pending in app-a1")
    except BaseException:
        stop_and_verify(handle)
        raise
    return Loaded(handle, rm, f"http://{handle.rest_address}")


def add_app_states(loaded: Loaded) -> None:
    """Two more applications in partition default, for views of every state: ``app-idle`` in root.b
    without asks (New) and ``app-ghost`` for a queue that does not exist (Rejected)."""
    loaded.rm.apps(app("app-idle", "root.b", user="bob"), app("app-ghost", "root.nope", user="eve"))
    loaded.rm.collect("application", "accepted rejected", 2, timeout=20)


def stop_loaded(loaded: Loaded) -> list[str]:
    loaded.rm.close()
    return stop_and_verify(loaded.handle)


def loaded_fixture(tmp_path_factory, name: str, extra: tuple[str, ...] = (), env: dict[str, str] | None = None):
    """The body of a ``loaded`` fixture: a loaded stack, stopped and checked after its tests."""
    import pytest

    handle = start_loaded(tmp_path_factory.mktemp(name) / "state", extra, env)
    yield handle
    problems = stop_loaded(handle)
    if problems:
        pytest.fail("\n".join(problems))
