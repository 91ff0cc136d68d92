"""Every exchange of every recording in ``../shared/k8s-wire`` replayed against the double.

Each file gets a fresh double (bearer token on, no kubelet: the recording server ran none; the
garbage collector on: it ran kube-controller-manager's) and the setup its notes describe, made
from the objects the recordings show. Then its exchanges are sent in order, watches held open
while the later requests go out, and every answer is compared with the recording (wire.py).

Where the double cannot or should not match, the difference is listed below with the reason
(``RELAXED``): nothing is skipped silently.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from typing import Any, Awaitable, Callable

import aiohttp
import pytest
import yaml

from k8s_shim.fake.api import Api
from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from tests.conftest import wait_until_async
from tests.k8s_fake.wire import (Translator, compare, compare_lines, load, recordings, sorted_by_key, WIRE)

TOKEN = "wire-token"

# (file, exchange) -> (why, regexes of the difference lines that are accepted there)
RELAXED: dict[tuple[str, int], tuple[str, list[str]]] = {
    ("01", 0): ("/version names our build (gitVersion, gitCommit, buildDate ...); major/minor/platform match",
                [r"^(gitVersion|gitCommit|gitTreeState|buildDate|goVersion): "]),
    ("25", 4): ("the 422 message of a forbidden pod update carries a Go diff of the spec (README: match in kind)",
                [r"^details.causes\[0\].message: "]),
    ("25", 5): ("same Go diff", [r"^details.causes\[0\].message: "]),
    ("25", 6): ("same Go diff", [r"^details.causes\[0\].message: "]),
    ("32", 6): ("the bad-base64 422 quotes the whole patched object in Go's words (notes: only reason and code)",
                [r"^details"]),
    ("38", 0): ("the truncated-JSON 400 quotes Go's decoder error and a snippet of the body", []),
    ("12", 4): ("the bad continue token 400 quotes Go's JSON decoder error", []),
    ("42", 7): ("the 'kubernetes' Service's targetPort is the port the server listens on",
                [r"targetPort"]),
    ("42", 11): ("the namespaces list holds the namespaces of the other files' setups, which this replay does "
                 "not create (each file runs on its own fresh double)", [r"^items: "]),
}
MESSAGE_KIND_ONLY = {k for k in RELAXED if k[0] in ("25", "32", "38", "12")}

# discovery: the double serves a subset of the real server's groups and resources; each entry it
# serves must equal the recorded one, and the ones it leaves out are listed here
NOT_SERVED_GROUPS = {"apiregistration.k8s.io", "authentication.k8s.io", "authorization.k8s.io", "autoscaling",
                     "certificates.k8s.io", "networking.k8s.io", "rbac.authorization.k8s.io",
                     "admissionregistration.k8s.io", "apiextensions.k8s.io", "node.k8s.io", "discovery.k8s.io",
                     "flowcontrol.apiserver.k8s.io"}


# -- setups: the state each file's notes describe, rebuilt from the recorded objects ------------

def recorded(prefix: str, exchange: int) -> dict[str, Any]:
    path = next(WIRE.glob(f"{prefix}-*.json"))
    return load(path)["exchanges"][exchange]


def ensure_namespace(api: Api, name: str, labels: dict[str, str] | None = None) -> None:
    if api.store.get("namespaces", name) is None:
        api.create(api.kind("v1", "namespaces"), "", {"metadata": {"name": name, "labels": labels or {}}})


def ensure_priority_classes(api: Api) -> None:
    pcs = api.kind("scheduling.k8s.io/v1", "priorityclasses")
    for ex in (0, 1):
        body = recorded("08", ex)["request"]["body"]
        if api.store.get("scheduling.k8s.io/priorityclasses", body["metadata"]["name"]) is None:
            api.create(pcs, "", body)


def recreate(api: Api, tr: Translator, obj: dict[str, Any], plural: str = "pods", *,
             keep_status: bool = True) -> dict[str, Any]:
    """Create an object so that it ends up as recorded: its own fields posted, what the server
    adds left to the server, then bound and its status written as the recording shows."""
    kind = api.kind("v1", plural)
    meta = obj["metadata"]
    namespace = meta.get("namespace", "")
    if kind.namespaced:
        ensure_namespace(api, namespace)
    body_meta = {k: copy.deepcopy(meta[k]) for k in ("name", "namespace", "labels", "annotations", "generateName")
                 if k in meta}
    if meta.get("ownerReferences"):
        body_meta["ownerReferences"] = tr.request_value(meta["ownerReferences"])
    body = {"metadata": body_meta, **{k: copy.deepcopy(v) for k, v in obj.items() if k not in ("metadata",)}}
    if plural == "pods":
        body["spec"].pop("nodeName", None)
        body["spec"].pop("priority", None)
        body.pop("status", None)
        if body["spec"].get("priorityClassName"):
            ensure_priority_classes(api)
    if plural == "nodes":
        body["spec"]["taints"] = [t for t in body["spec"].get("taints") or []
                                  if t.get("key") != "node.kubernetes.io/not-ready"]
    created = api.create(kind, namespace, body)
    tr.learn_uid(meta.get("uid", ""), created["metadata"]["uid"])
    if plural == "pods":
        if obj["spec"].get("nodeName"):
            api.bind(namespace, meta["name"], {"target": {"name": obj["spec"]["nodeName"]}})
        status = obj.get("status") or {}
        if keep_status and (status.get("phase") not in (None, "Pending") or status.get("nominatedNodeName")
                            or any(c.get("type") != "PodScheduled" or c.get("status") != "True"
                                   for c in status.get("conditions") or [])):
            api.patch(kind, namespace, meta["name"], "merge", {"status": status}, "status")
    return created


def list_namespace_state(api: Api, tr: Translator, only: str | None = None) -> None:
    """Namespaces list and wire as files 09-14 and 17-20 saw them (file 09's cluster-wide list)."""
    ensure_namespace(api, "wire", recorded("05", 0)["request"]["body"]["metadata"]["labels"])
    items = recorded("09", 1)["response"]["body"]["items"]
    for item in sorted(items, key=lambda i: int(i["metadata"]["resourceVersion"])):  # the recorded write order
        if only is None or item["metadata"]["namespace"] == only:
            recreate(api, tr, item)


def setup_file(prefix: str, api: Api, tr: Translator) -> None:
    ns = lambda *names: [ensure_namespace(api, n) for n in names]  # noqa: E731
    if prefix == "03":
        recreate(api, tr, recorded("02", 1)["response"]["body"], "nodes")
    elif prefix == "04":
        recreate(api, tr, recorded("04", 0)["response"]["body"]["items"][0], "nodes")
    elif prefix in ("06", "07", "08", "33", "34", "36", "40", "43"):
        ensure_namespace(api, "wire", recorded("05", 0)["request"]["body"]["metadata"]["labels"])
    elif prefix in ("09", "10", "11", "12", "13", "14", "20"):
        list_namespace_state(api, tr)
    elif prefix in ("15", "16"):
        ns("watch")
    elif prefix == "17":
        ns("watch", "list")
    elif prefix in ("18", "19"):
        list_namespace_state(api, tr, only="list")
        ns("watch")
        if prefix == "19":
            tr.rv[184] = api.store.buckets["pods"].last_rv  # file 12 listed this state at 184
            recreate(api, tr, recorded("18", 1)["response"]["body"])  # then file 18 created l-new
    elif prefix in ("21", "23"):
        ns("bind")
    elif prefix in ("22", "24", "25"):
        for ex in (5, 7):
            recreate(api, tr, recorded("21", ex)["response"]["body"])
        if prefix in ("24", "25"):
            recreate(api, tr, recorded("23", 6)["response"]["body"])
    elif prefix == "26":
        for item in recorded("26", 0)["response"]["body"]["items"]:
            recreate(api, tr, item)
    elif prefix in ("27", "29"):  # the pods as the watch first showed them (29: bound, status not yet written)
        first = {}
        for line in recorded(prefix, 0)["response"]["lines"]:
            first.setdefault(line["object"]["metadata"]["name"], copy.deepcopy(line["object"]))
        for obj in first.values():
            recreate(api, tr, obj, keep_status=prefix == "27")
    elif prefix == "28":
        recreate(api, tr, recorded("28", 0)["response"]["body"])
    elif prefix in ("30", "31"):
        ns("gc")
    elif prefix == "32":
        ns("yunikorn")
    elif prefix in ("35", "37", "38", "39", "41"):
        ensure_namespace(api, "wire", recorded("05", 0)["request"]["body"]["metadata"]["labels"])
        ensure_priority_classes(api)
        recreate(api, tr, recorded("06", 1)["response"]["body"])
        recreate(api, tr, recorded("02", 1)["response"]["body"], "nodes")
        if prefix == "41":
            cm = recorded("41", 4)["response"]["body"]
            created = api.create(api.kind("v1", "configmaps"), "wire", {"metadata": {"name": "bump"},
                                                                         "data": cm["data"]})
            tr.learn_uid(cm["metadata"]["uid"], created["metadata"]["uid"])
    elif prefix == "42":
        pass
    if prefix == "14":
        tr.rv[184] = api.store.rv  # file 12's list saw this very state at 184


# -- hooks: what happened between two recorded exchanges --------------------------------------

Hook = Callable[[FakeCluster, Translator], Awaitable[None]]


async def compact_now(cluster: FakeCluster, tr: Translator) -> None:
    """File 14: etcd compacted past the old version after a newer write."""
    api = cluster.api
    ensure_namespace(api, "elsewhere")
    cluster.store.compact()


def _gc(cluster: FakeCluster):
    return next(c for c in cluster.controllers if hasattr(c, "pause"))


async def hold_gc(cluster: FakeCluster, tr: Translator) -> None:
    """File 31: the GET right after the DELETE came before the collector acted (about 0.02 s)."""
    _gc(cluster).pause()


async def gc_done(cluster: FakeCluster, tr: Translator) -> None:
    """Files 30, 31: the request after this one was sent once the collector had finished."""
    gc = _gc(cluster)
    gc.resume()
    await wait_until_async(gc.idle, 10, "the garbage collector to finish")


async def churn(cluster: FakeCluster, tr: Translator) -> None:
    """File 19: 150 annotation patches on pod watch/churn pushed the old events out."""
    api = cluster.api
    pods = api.kind("v1", "pods")
    api.create(pods, "watch", {"metadata": {"name": "churn"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
    for i in range(150):
        api.patch(pods, "watch", "churn", "merge", {"metadata": {"annotations": {"n": str(i)}}})


async def poke_elsewhere(cluster: FakeCluster, tr: Translator) -> None:
    """File 17 exchange 6: pods were written elsewhere while the watch was open."""
    api = cluster.api
    api.create(api.kind("v1", "pods"), "watch", {"metadata": {"generateName": "poke-"},
                                                 "spec": {"containers": [{"name": "c", "image": "i"}]}})


BEFORE: dict[tuple[str, int], Hook] = {("14", 0): compact_now, ("19", 2): churn, ("31", 4): hold_gc,
                                       ("31", 6): gc_done, ("30", 7): gc_done}
AFTER_OPEN: dict[tuple[str, int], Hook] = {("17", 5): poke_elsewhere}
FILE_OPTIONS: dict[str, dict[str, Any]] = {
    # the real watch cache keeps about 100 changes per resource: the double keeps what it is told
    "19": {"history": 100},
    # a real server sends a bookmark about once a minute; the double's interval is a setting
    "17": {"bookmark_interval": 2.0},
}


# -- the replay ---------------------------------------------------------------------------------

def _headers(prefix: str, index: int, recorded_headers: dict[str, str]) -> dict[str, str]:
    headers = dict(recorded_headers)
    if prefix != "40":
        headers["Authorization"] = f"Bearer {TOKEN}"
    elif index == 1:
        headers["Authorization"] = "Bearer not-the-token"
    if "Accept" not in headers:
        headers["Accept"] = ""  # the recorder sent none
    return headers


def _query(tr: Translator, query: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for key, value in query.items():
        if key == "resourceVersion":
            value = tr.rv_of(value)
        elif key == "continue":
            value = tr.continue_token(value)
        out.append((key, value))
    return out


def _token_rv(token: str) -> int:
    import base64
    try:
        return int(json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["rv"])
    except (ValueError, KeyError):
        return 0


def _watch_end(note: str) -> tuple[float, bool]:
    """(seconds the recorded stream lasted, whether the server ended it)."""
    m = re.search(r"stream ended after ([0-9.]+) s: (.*)", note or "")
    if not m:
        return 5.0, False
    return float(m.group(1)), m.group(2).startswith("server ended")


async def _watch(session: aiohttp.ClientSession, url: str, params: list, headers: dict, count: int,
                 lasted: float, server_ends: bool, opened: asyncio.Future) -> tuple[int, str, list[dict]]:
    lines: list[dict] = []
    async with session.get(url, params=params, headers=headers) as resp:
        opened.set_result(None)
        ctype = resp.headers.get("Content-Type", "")
        deadline = asyncio.get_running_loop().time() + lasted + 5.0
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if not server_ends and len(lines) >= count:
                left = min(left, 0.3)  # anything past the recorded lines must not come
            if left <= 0:
                break
            try:
                raw = await asyncio.wait_for(resp.content.readline(), left)
            except asyncio.TimeoutError:
                break
            if not raw:
                break
            lines.append(json.loads(raw))
        return resp.status, ctype, lines


def _compare_response(prefix: str, index: int, ex: dict, status: int, ctype: str, text: bytes,
                      tr: Translator, out: list[str]) -> None:
    want = ex["response"]
    where = f"{prefix}[{index}] {ex['request']['method']} {ex['request']['path']}"
    problems: list[str] = []
    if status != want["status"]:
        problems.append(f"status {status}, recorded {want['status']}")
    want_ctype = want["headers"].get("Content-Type", "")
    if ctype.split(";")[0].strip() != want_ctype.split(";")[0].strip():
        problems.append(f"Content-Type {ctype!r}, recorded {want_ctype!r}")
    if "body_text" in want:
        if want_ctype.startswith("application/yaml"):
            compare(yaml.safe_load(want["body_text"]), yaml.safe_load(text), "", tr, problems)
        elif text.decode() != want["body_text"]:
            problems.append(f"body {text[:200]!r}, recorded {want['body_text']!r}")
    elif "body" in want:
        try:
            body = json.loads(text)
        except ValueError:
            problems.append(f"body is not JSON: {text[:200]!r}")
            body = None
        if body is not None:
            if prefix == "01":
                _compare_discovery(want["body"], body, tr, problems)
            else:
                req_meta = (ex["request"].get("body") or {}).get("metadata") if isinstance(
                    ex["request"].get("body"), dict) else None
                generated = (req_meta or {}).get("generateName")
                items = want["body"].get("items") if isinstance(want["body"], dict) else None
                compare(want["body"], body, "", tr, problems, generated_name=generated,
                        message_kind_only=(prefix, index) in MESSAGE_KIND_ONLY,
                        unordered=isinstance(items, list) and not sorted_by_key(items))
    relaxed = RELAXED.get((prefix, index))
    if relaxed and relaxed[1]:
        problems = [p for p in problems if not any(re.search(r, p) for r in relaxed[1])]
    out += [f"{where}: {p}" for p in problems]


def _compare_discovery(want: dict, got: dict, tr: Translator, problems: list[str]) -> None:
    if want.get("kind") == "APIGroupList":
        served = []  # the double serves each group's preferred (v1) version only
        for g in want["groups"]:
            if g["name"] not in NOT_SERVED_GROUPS:
                served.append({**g, "versions": [v for v in g["versions"] if v == g["preferredVersion"]]})
        compare(served, got["groups"], "groups", tr, problems)
    elif want.get("kind") == "APIResourceList":
        mine = {r["name"]: r for r in got["resources"]}
        compare({k: v for k, v in want.items() if k != "resources"},
                {k: v for k, v in got.items() if k != "resources"}, "", tr, problems)
        for entry in want["resources"]:
            if entry["name"] in mine:
                compare(entry, mine[entry["name"]], f"resources[{entry['name']}]", tr, problems)
        recorded_names = {r["name"] for r in want["resources"]}
        extra = sorted(set(mine) - recorded_names)
        if extra:
            problems.append(f"resources the real server does not list: {extra}")
    else:
        compare(want, got, "", tr, problems)


async def replay(path) -> list[str]:
    data = load(path)
    prefix = path.name[:2]
    options = FILE_OPTIONS.get(prefix, {})
    cluster = FakeCluster(ClusterOptions(token=TOKEN, kubelet=False, history=options.get("history", 10_000),
                                         bookmark_interval=options.get("bookmark_interval", 60.0),
                                         volume_binder=False))  # the v1.24 recordings ran no PV binder
    url = await cluster.start()
    tr = Translator()
    problems: list[str] = []
    watches: list[tuple[int, dict, asyncio.Task]] = []
    try:
        setup_file(prefix, cluster.api, tr)
        async with aiohttp.ClientSession(skip_auto_headers=("User-Agent", "Accept")) as session:
            for index, ex in enumerate(data["exchanges"]):
                if (prefix, index) in BEFORE:
                    await BEFORE[(prefix, index)](cluster, tr)
                req = ex["request"]
                if "while" not in ex.get("note", "") and "watch" not in ex.get("note", ""):
                    # sent after the earlier watches the server ended (their time ran out)
                    for _, earlier, task in watches:
                        if _watch_end(earlier.get("note", ""))[1] and not task.done():
                            await asyncio.wait([task])
                rv = (req.get("query") or {}).get("resourceVersion")
                if rv is not None:
                    tr.anchor(rv, cluster.store.rv)
                cont = (req.get("query") or {}).get("continue")
                if cont:
                    tr.anchor(str(_token_rv(cont)), cluster.store.rv)
                headers = _headers(prefix, index, req.get("headers") or {})
                params = _query(tr, req.get("query") or {})
                if "lines" in ex["response"]:
                    lasted, server_ends = _watch_end(ex.get("note", ""))
                    opened = asyncio.get_running_loop().create_future()
                    task = asyncio.create_task(_watch(session, url + req["path"], params, headers,
                                                      len(ex["response"]["lines"]), lasted, server_ends, opened))
                    await asyncio.wait([opened, task], return_when=asyncio.FIRST_COMPLETED)
                    if (prefix, index) in AFTER_OPEN:
                        await AFTER_OPEN[(prefix, index)](cluster, tr)
                    watches.append((index, ex, task))
                    continue
                body = req.get("body")
                data_bytes = None
                if body is not None:
                    data_bytes = (json.dumps(tr.request_value(body)) if not isinstance(body, str) else body).encode()
                async with session.request(req["method"], url + req["path"], params=params, headers=headers,
                                           data=data_bytes) as resp:
                    text = await resp.read()
                    _compare_response(prefix, index, ex, resp.status, resp.headers.get("Content-Type", ""), text,
                                      tr, problems)
            for index, ex, task in watches:
                status, ctype, lines = await task
                where = f"{prefix}[{index}] watch {ex['request']['path']}"
                want = ex["response"]
                if status != want["status"]:
                    problems.append(f"{where}: status {status}, recorded {want['status']}")
                found: list[str] = []
                compare_lines(want["lines"], lines, tr, found)
                problems += [f"{where}: {p}" for p in found]
    finally:
        for _, _, task in watches:
            task.cancel()
        await cluster.stop()
    problems += tr.problems
    return problems


FILES = recordings()


@pytest.mark.skipif(not FILES, reason=f"no recordings: {WIRE} is absent (CI lays shared/ beside the clone)")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
@pytest.mark.timeout(60)
def test_the_double_answers_as_the_recorded_server(path):
    problems = asyncio.run(replay(path))
    assert not problems, f"{path.name}: {len(problems)} differences\n  " + "\n  ".join(problems)


def test_every_relaxed_comparison_names_a_recorded_exchange():
    names = {p.name[:2]: load(p) for p in FILES}
    for (prefix, index), (why, _) in RELAXED.items():
        if names:
            assert prefix in names and index < len(names[prefix]["exchanges"]), (prefix, index, why)
