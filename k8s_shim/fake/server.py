"""The HTTP front of the fake API server: one handler on :mod:`~k8s_shim.fake.httpd` that
routes Kubernetes REST paths to :class:`~k8s_shim.fake.api.Api`, checks the bearer token,
negotiates media types, encodes lists from stored bytes and streams watches.

A request is answered in the call that received it (no task) unless it has to wait: lists and
watches are coroutines the HTTP server runs as tasks.

Routing is one catch-all handler so that every answer a real server gives for a bad path or verb
(JSON 404 for an unknown resource, plain-text 404 outside the API, 405 for a verb a resource
does not serve) comes from one place.
"""

from __future__ import annotations

import asyncio
import logging
import random
from functools import lru_cache
from dataclasses import dataclass
from typing import Any, Coroutine

import orjson
import yaml

from k8s_shim.fake import discovery, openapi
from k8s_shim.fake.tables import table, wants_table
from k8s_shim.fake.api import PATCH_TYPES, Api, DeleteOptions
from k8s_shim.fake.errors import ApiError, status_body
from k8s_shim.fake.httpd import HttpServer, Request, Response, Stream
from k8s_shim.fake.kinds import Kind
from k8s_shim.fake.selectors import SelectorError, parse_fields, parse_labels
from k8s_shim.fake.store import Event, Filter, WatchQueue

__all__ = ["FakeApiServer", "ServerOptions", "COMPACT_PATH", "FAULTS_PATH", "BINDINGS_PATH"]

log = logging.getLogger("korral.k8s.fake")
JSON = "application/json"
COMPACT_PATH = "/korral-fake/compact"  # POST: forget the history now (an operator's and tests' hook)
# POST {"method": "DELETE", "pathPrefix": "/api/v1/namespaces/x/pods/", "status": 503, "count": 3}: the next
# `count` matching requests are answered with that status (a tests' hook for an API server that fails);
# "retryAfter": N adds a Retry-After header, "share": 0.5 answers only that share of the matching requests
# (every other one); status 429 is answered as API Priority and Fairness answers it (_too_many_requests)
FAULTS_PATH = "/korral-fake/faults"
TOO_MANY = b"Too many requests, please try again later.\n"  # APF's (and max-inflight's) plain-text answer
# the headers APF sets on the answers it classifies (uids of the flow schema and priority level; fixed here)
PF_HEADERS = (b"X-Kubernetes-Pf-Flowschema-Uid: 3b0ad3ba-5d4e-4a7e-9c1b-6f0e0e2f0001\r\n"
              b"X-Kubernetes-Pf-Prioritylevel-Uid: 3b0ad3ba-5d4e-4a7e-9c1b-6f0e0e2f0002\r\n")
BINDINGS_PATH = "/korral-fake/bindings"  # GET: pods/binding requests per pod (tests count double binds)
OBJECT_META = {"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
               "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
               "ownerReferences", "finalizers", "managedFields", "clusterName"}
YAML = "application/yaml"
TEXT = "text/plain; charset=utf-8"
MAX_BODY = 64 * 1024 * 1024  # bytes of a request body (413 beyond)


@dataclass(slots=True)
class ServerOptions:
    token: str | None = None  # bearer token every request must carry; None: no authentication
    bookmark_interval: float = 60.0  # seconds between BOOKMARKs on a watch without timeoutSeconds
    watch_timeout: float = 1800.0  # a watch without timeoutSeconds ends after 1-2x this
    idle_timeout: float = 90.0  # a kept-alive connection without a request this long is closed
    address: str = "127.0.0.1:6443"  # what /api reports as the server address
    throttle_qps: float = 0.0  # >0: requests beyond this rate (burst as much) answered 429, as APF (watches exempt)


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


class _YamlDumper(yaml.SafeDumper):
    """YAML as the Go server prints it: multi-line strings as literal blocks, strings that would
    read as another type double-quoted."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    if "\n" in text:
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|")
    if dumper.resolve(yaml.ScalarNode, text, (True, False)) != "tag:yaml.org,2002:str":
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"')
    return dumper.represent_scalar("tag:yaml.org,2002:str", text)


_YamlDumper.add_representer(str, _represent_str)


def _bool_param(value: str | None) -> bool:
    """Kubernetes' rule for ?watch=: false only for '0' and 'false' in any case (file 20)."""
    return value is not None and value.lower() not in ("0", "false")


def _int_param(query: Any, name: str) -> int | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ApiError.bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


@lru_cache(maxsize=256)  # clients send few distinct Accept headers
def _media_of(header: str) -> str:
    """The media type to answer in for an Accept header (406 when none is served)."""
    if not header.strip():
        return JSON
    for part in header.split(","):
        media, _, params = part.strip().partition(";")
        media = media.strip().lower()
        if "as=" in params.replace(" ", ""):
            continue  # Table and discovery variants: not served, a plainer choice follows
        if media in (JSON, "application/*", "*/*", "application/json-patch+json"):
            return JSON
        if media == YAML:
            return YAML
    raise ApiError(406, "NotAcceptable", "406: Not Acceptable", {})


class _Plain404(Exception):
    """A path outside the API: answered in plain text like Go's mux."""


@dataclass(slots=True)
class _Route:
    kind: Kind | None
    namespace: str | None
    name: str | None
    subresource: str
    watch: bool
    bindings: bool = False  # POST /api/v1/namespaces/NS/bindings


class FakeApiServer:
    """The HTTP front (:class:`~k8s_shim.fake.httpd.HttpServer`) around one :class:`Api`."""

    def __init__(self, api: Api, options: ServerOptions | None = None):
        self.api = api
        self.options = options or ServerOptions()
        self.served = discovery.served_group_versions(api.kinds)
        self.http = HttpServer(self.handle, MAX_BODY, on_stopping=self._on_shutdown,
                               idle_timeout=self.options.idle_timeout)
        self._stopping: asyncio.Future | None = None
        self.rng = random.Random()
        self.faults: list[dict[str, Any]] = []  # FAULTS_PATH's: method, pathPrefix, status, count left, ...
        self.throttled = 0  # requests answered 429 (faults and throttle_qps)
        self._tokens, self._tokens_at = self.options.throttle_qps, 0.0  # throttle_qps's bucket
        self._open_watches: set[WatchQueue] = set()
        # (id(event), line type) -> (event, line) for the watches woken in this loop iteration
        self._shared_lines: dict[tuple[int, bytes], tuple[Event, bytes]] = {}

    def _on_shutdown(self) -> None:
        stopping = self.stopping()
        if not stopping.done():
            stopping.set_result(None)  # open watches end their streams
        for queue in list(self._open_watches):
            queue.poke()

    def stopping(self) -> asyncio.Future:
        if self._stopping is None:
            self._stopping = asyncio.get_running_loop().create_future()
        return self._stopping

    # -- the front door ----------------------------------------------------------------------

    def handle(self, request: Request) -> Response | Coroutine[Any, Any, Response | Stream]:
        """The answer to ``request``, or (for what has to wait: lists, watches) a coroutine of it."""
        try:
            if self.options.token is not None:
                if request.headers.get("authorization", "") != f"Bearer {self.options.token}":
                    raise ApiError.unauthorized()
            if request.path.startswith("/openapi/"):
                return self._openapi(request)
            media = self._accept(request)
            result = self._dispatch(request, media)
        except Exception as exc:  # noqa: BLE001 - a bug must answer a Status, not drop the connection
            return self._failed(exc, request)
        if type(result) is Response:
            return result
        return self._guarded(result, request)

    async def _guarded(self, pending: Coroutine[Any, Any, Response | Stream], request: Request) -> Response | Stream:
        try:
            return await pending
        except Exception as exc:  # noqa: BLE001 - as in handle()
            return self._failed(exc, request)

    def _failed(self, exc: Exception, request: Request) -> Response:
        if isinstance(exc, _Plain404):
            return Response(404, b"404 page not found\n", TEXT)
        if isinstance(exc, ApiError):
            return self._error(exc)
        log.error("fake API server: %s %s failed", request.method, request.path_qs, exc_info=exc)
        return self._error(ApiError(500, "InternalError", "an error on the server has prevented the request "
                                    "from succeeding", {}))

    def _openapi(self, request: Request) -> Response:
        path = request.path.rstrip("/")
        if path == "/openapi/v3":
            return Response(200, _dumps(openapi.root(self.api.kinds)), JSON)
        if path.startswith("/openapi/v3/"):
            rest = path[len("/openapi/v3/"):]
            for gv in self.served:
                if openapi.path_of(gv) == rest:
                    return Response(200, _dumps(openapi.group_version_doc(self.api.kinds, gv)), JSON)
        raise _Plain404()

    def _add_fault(self, request: Request, media: str) -> Response:
        if request.method == "GET":  # the faults still to come, and the requests throttled so far
            return self._answer({"faults": self.faults, "throttled": self.throttled}, media)
        if request.method != "POST":
            raise ApiError.method_not_allowed()
        try:
            body = orjson.loads(request.body)
            fault = {"method": str(body.get("method", "*")).upper(), "pathPrefix": str(body.get("pathPrefix", "/")),
                     "status": int(body.get("status", 500)), "count": int(body.get("count", 1)),
                     "retryAfter": int(body["retryAfter"]) if body.get("retryAfter") is not None else None,
                     "share": float(body.get("share", 1.0)), "credit": 0.0}
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError) as exc:
            raise ApiError.bad_request(f"a fault is {{method, pathPrefix, status, count, retryAfter, share}}: {exc}") \
                from None
        if not 400 <= fault["status"] <= 599 or fault["count"] < 1:
            raise ApiError.bad_request("a fault's status is 400-599 and its count at least 1")
        if not 0 < fault["share"] <= 1 or (fault["retryAfter"] is not None and fault["retryAfter"] < 0):
            raise ApiError.bad_request("a fault's share is above 0 and at most 1, its retryAfter 0 or more seconds")
        self.faults.append(fault)
        return self._answer({"faults": self.faults, "throttled": self.throttled}, media)

    def _fault(self, method: str, path: str) -> Response | None:
        """The answer of the first fault that matches (and whose share is due), if any."""
        fault = next((f for f in self.faults if f["method"] in ("*", method) and path.startswith(f["pathPrefix"])),
                     None)
        if fault is None:
            return None
        fault["credit"] += fault["share"]  # a share of 0.25: every fourth matching request
        if fault["credit"] < 1.0:
            return None
        fault["credit"] -= 1.0
        fault["count"] -= 1
        if fault["count"] <= 0:
            self.faults.remove(fault)
        status, after = fault["status"], fault["retryAfter"]
        if status == 429:
            return self._too_many_requests(1 if after is None else after)
        exc = ApiError(status, "InternalError" if status >= 500 else "BadRequest",
                       f"a fault injected through {FAULTS_PATH}", {})
        response = self._error(exc)
        if after is not None:
            response.headers = b"Retry-After: %d\r\n" % after
        return response

    def _too_many_requests(self, retry_after: int) -> Response:
        """429 as API Priority and Fairness rejects a request: Retry-After in seconds, a plain-text
        body (not a Status), the flow schema's and priority level's uids."""
        self.throttled += 1
        return Response(429, TOO_MANY, TEXT, b"Retry-After: %d\r\nX-Content-Type-Options: nosniff\r\n%s"
                        % (retry_after, PF_HEADERS))

    def _token(self) -> bool:
        """A token of ``throttle_qps``'s bucket (as many as a second's worth at most), if one is there."""
        now = asyncio.get_running_loop().time()
        qps = self.options.throttle_qps
        self._tokens = min(qps, self._tokens + (now - self._tokens_at) * qps)
        self._tokens_at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _error(self, exc: ApiError) -> Response:
        return Response(exc.code, _dumps(exc.body()), JSON)

    @staticmethod
    def _accept(request: Request) -> str:
        return _media_of(request.headers.get("accept", ""))

    def _answer(self, body: Any, media: str, status: int = 200) -> Response:
        if media == YAML:
            text = yaml.dump(body, Dumper=_YamlDumper, sort_keys=True, default_flow_style=False, allow_unicode=True)
            return Response(status, text.encode(), YAML + "; charset=utf-8")
        return Response(status, _dumps(body), JSON)

    def _raw(self, raw: bytes, media: str, status: int = 200) -> Response:
        if media == YAML:
            return self._answer(orjson.loads(raw), media, status)
        return Response(status, raw, JSON)

    # -- routing -------------------------------------------------------------------------------

    def _dispatch(self, request: Request, media: str) -> Response | Coroutine[Any, Any, Response | Stream]:
        path = request.path
        method = request.method
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/livez", "/readyz"):
            return Response(200, b"ok", TEXT)
        if path == FAULTS_PATH:
            return self._add_fault(request, media)
        if self.faults:
            fault = self._fault(method, path)
            if fault is not None:
                return fault
        if self.options.throttle_qps > 0 and not path.startswith("/korral-fake/") and \
                not _bool_param(request.query.get("watch")) and "/watch/" not in path and not self._token():
            return self._too_many_requests(1)
        if path == COMPACT_PATH:
            if method != "POST":
                raise ApiError.method_not_allowed()
            resource = request.query.get("resource")
            if resource is not None and resource not in self.api.store.buckets:
                raise ApiError.bad_request(f"no resource {resource!r} to compact; one of "
                                           f"{', '.join(sorted(self.api.store.buckets))}")
            return self._answer({"compactedTo": str(self.api.store.compact(resource))}, media)
        if path == BINDINGS_PATH:
            if method != "GET":
                raise ApiError.method_not_allowed()
            return self._answer(self.api.bind_requests, media)
        if path == "/version":
            if method != "GET":
                raise ApiError.method_not_allowed()
            return self._answer(discovery.VERSION, media)
        if not parts or parts[0] not in ("api", "apis"):
            raise _Plain404()
        if parts == ["api"]:
            return self._answer(discovery.api_versions(self.options.address), media)
        if parts == ["apis"]:
            return self._answer(discovery.group_list(self.api.kinds), media)
        if parts[0] == "api":
            if parts[1] != "v1":
                raise _Plain404()
            gv, rest = "v1", parts[2:]
        else:
            if len(parts) == 2:
                if not any(k.group == parts[1] for k in self.api.kinds):
                    raise _Plain404()
                return self._answer({"kind": "APIGroup", "apiVersion": "v1", **discovery.group(parts[1], self.api.kinds)}, media)
            gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
            if gv not in self.served:
                if any(k.group == parts[1] for k in self.api.kinds):
                    raise ApiError.unknown_resource()  # a version not enabled (v1.36 file 15: resource.k8s.io/v1beta2)
                raise _Plain404()
        if not rest:
            return self._answer(discovery.resource_list(self.api.kinds, gv), media)
        route = self._route(gv, rest)
        return self._serve(request, media, route)

    def _route(self, gv: str, rest: list[str]) -> _Route:
        watch = False
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
            if not rest:
                raise ApiError.unknown_resource()
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3 and gv == "v1" and rest[2] in ("status", "finalize") \
                and len(rest) == 3:
            return _Route(self.api.kind(gv, "namespaces"), None, rest[1], rest[2], watch)
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if gv == "v1" and rest[0] == "bindings" and namespace is not None and len(rest) == 1:
            return _Route(None, namespace, None, "", False, bindings=True)
        kind = self.api.by_path.get((gv, rest[0]))
        if kind is None or len(rest) > 3 or (namespace is not None and not kind.namespaced):
            raise ApiError.unknown_resource()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in kind.subresources:
            raise ApiError.unknown_resource()
        if kind.namespaced and name is not None and namespace is None:
            raise ApiError.unknown_resource()
        return _Route(kind, namespace, name, sub, watch)

    @staticmethod
    def _body(request: Request, kind_name: str, patch: bool = False) -> tuple[Any, str]:
        ctype = request.headers.get("content-type", JSON).split(";")[0].strip().lower()
        raw = request.body
        if patch:
            ptype = PATCH_TYPES.get(ctype)
            if ptype is None or ptype == "apply":
                raise ApiError(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})
        elif ctype not in (JSON, YAML, "application/json-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted "
                           "media types include: application/json, application/yaml, "
                           "application/vnd.kubernetes.protobuf")
        else:
            ptype = ""
        if not raw.strip():
            raise ApiError.bad_request(f"the object provided is unrecognized (must be of type {kind_name}): "
                                       "couldn't get version/kind; json parse error: unexpected end of JSON input "
                                       "(<empty>)")
        try:
            body = yaml.safe_load(raw) if ctype == YAML else orjson.loads(raw)
        except (orjson.JSONDecodeError, yaml.YAMLError):
            snippet = raw[:30].decode("utf-8", "replace")
            raise ApiError.bad_request(f"the object provided is unrecognized (must be of type {kind_name}): "
                                       "couldn't get version/kind; json parse error: unexpected end of JSON input "
                                       f"({snippet} ...)") from None
        return body, ptype

    @staticmethod
    def _manager(request: Request) -> str:
        manager = request.query.get("fieldManager")
        if manager:
            return manager
        agent = request.headers.get("user-agent", "")
        return agent.split("/")[0].split(" ")[0] or "unknown"

    def _serve(self, request: Request, media: str, route: _Route) -> Response | Coroutine[Any, Any, Response | Stream]:
        method, api, kind, q = request.method, self.api, route.kind, request.query
        if route.bindings:
            if method != "POST":
                raise ApiError.method_not_allowed()
            body, _ = self._body(request, "Binding")
            name = (body.get("metadata") or {}).get("name", "") if isinstance(body, dict) else ""
            return self._answer(api.bind(route.namespace or "", name, body), media, 201)
        assert kind is not None
        ns = route.namespace or ""
        if route.name is None:  # a collection
            if method == "GET":
                if route.watch or _bool_param(q.get("watch")):
                    return self._watch(request, kind, route.namespace)
                return self._list(request, media, kind, route.namespace)
            if method == "POST" and not route.watch:
                if kind.namespaced and route.namespace is None:
                    raise ApiError.method_not_allowed()
                body, _ = self._body(request, kind.kind)
                self._strict(request, kind, body)
                obj = api.create(kind, ns, body, self._manager(request), fresh=True)
                return self._answer(api.full(kind, obj), media, 201)
            if method == "DELETE" and not route.watch:
                return self._delete_collection(request, media, kind, route.namespace)
            raise ApiError.method_not_allowed()
        name, sub = route.name, route.subresource
        if route.watch:
            if method != "GET":
                raise ApiError.method_not_allowed()
            return self._watch(request, kind, route.namespace, name)
        verbs = kind.subresources.get(sub, ()) if sub else ("get", "update", "patch", "delete")
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "POST": "create"}.get(method)
        if verb not in verbs:
            raise ApiError.method_not_allowed()
        if sub == "binding":
            body, _ = self._body(request, "Binding")
            return self._answer(api.bind(ns, name, body), media, 201)
        if sub == "eviction":
            body, _ = self._body(request, "Eviction")
            return self._answer(api.evict(ns, name, body), media, 201)
        if sub in ("log", "exec", "attach", "proxy"):
            raise ApiError(400, "BadRequest", f"the fake cluster runs no containers: {kind.plural}/{sub} is not "
                           "served")
        status_sub = sub if sub in ("status", "finalize", "resize") else ""
        if method == "GET":
            entry = api.entry(kind, ns, name)
            if wants_table(request.headers.get("accept", "")):
                return self._answer(table(kind.plural, [api.view(kind, entry.decode())], str(entry.rv),
                                          api.clock()), media)
            return self._raw(kind.prefix() + api.view_raw(kind, entry.raw)[1:], media)
        if method == "PUT":
            body, _ = self._body(request, kind.kind)
            self._strict(request, kind, body)
            if sub == "finalize":
                obj = self._finalize(kind, name, body)
            else:
                obj = api.update(kind, ns, name, body, status_sub, self._manager(request))
            return self._answer(api.full(kind, obj), media)
        if method == "PATCH":
            body, ptype = self._body(request, kind.kind, patch=True)
            obj = api.patch(kind, ns, name, ptype, body, status_sub, self._manager(request))
            return self._answer(api.full(kind, obj), media)
        # DELETE
        options = self._delete_options(request)
        body, is_object = api.delete(kind, ns, name, options)
        return self._answer(api.full(kind, body) if is_object else body, media)

    @staticmethod
    def _strict(request: Request, kind: Kind, body: Any) -> None:
        """``fieldValidation=Strict`` (kubectl's default): unknown fields of the object's top level
        and metadata are a 400, as a real server's strict decoder says."""
        if request.query.get("fieldValidation") != "Strict" or not isinstance(body, dict):
            return
        unknown = [f'unknown field "{k}"' for k in body if k not in kind.top_level_fields()] if \
            kind.top_level_fields() else []
        meta = body.get("metadata")
        if isinstance(meta, dict):
            unknown += [f'unknown field "metadata.{k}"' for k in meta if k not in OBJECT_META]
        if unknown:
            raise ApiError.bad_request(f"strict decoding error: {', '.join(unknown)}")

    def _finalize(self, kind: Kind, name: str, body: Any) -> dict[str, Any]:
        """PUT namespaces/NAME/finalize: the namespace controller's last step."""
        entry = self.api.entry(kind, "", name)
        obj = entry.decode()
        obj.setdefault("spec", {})["finalizers"] = ((body or {}).get("spec") or {}).get("finalizers") or []
        if not obj["spec"]["finalizers"]:
            obj["spec"].pop("finalizers")
        self.api.store.write(self.api.bucket_name(kind), name, obj)
        self.api._maybe_finish_deletion(kind, obj)
        return obj

    @staticmethod
    def _delete_options(request: Request) -> DeleteOptions:
        q = request.query
        options = DeleteOptions(grace_period=_int_param(q, "gracePeriodSeconds"),
                                propagation=q.get("propagationPolicy"))
        raw = request.body
        if raw.strip():
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise ApiError.bad_request("the object provided is unrecognized (must be of type DeleteOptions): "
                                           "couldn't get version/kind; json parse error") from None
            if isinstance(body, dict):
                if body.get("gracePeriodSeconds") is not None:
                    options.grace_period = int(body["gracePeriodSeconds"])
                if body.get("propagationPolicy"):
                    options.propagation = body["propagationPolicy"]
                if body.get("orphanDependents") is True and not options.propagation:
                    options.propagation = "Orphan"
                pre = body.get("preconditions") or {}
                options.uid = pre.get("uid")
                options.resource_version = pre.get("resourceVersion")
        if options.propagation not in (None, "Orphan", "Background", "Foreground"):
            raise ApiError.invalid("DeleteOptions", "", [("FieldValueNotSupported", "propagationPolicy",
                                   f'Unsupported value: "{options.propagation}": supported values: "Foreground", '
                                   '"Background", "Orphan", "nil"')])
        return options

    # -- lists -------------------------------------------------------------------------------

    def _selectors(self, request: Request, kind: Kind) -> tuple[Any, Any]:
        try:
            labels = parse_labels(request.query.get("labelSelector"))
            fields = parse_fields(request.query.get("fieldSelector"), kind.supports_field)
        except SelectorError as exc:
            message = str(exc)
            field_error = getattr(kind, "field_error", None)  # resource.k8s.io words it with the kind (file 06)
            if field_error is not None and message.startswith("field label not supported: "):
                message = field_error(message.split(": ", 1)[1])
            raise ApiError.bad_request(message) from None
        if kind.view_of and not fields.empty:
            fields.terms = tuple((kind.translate_field(f), eq, v) for f, eq, v in fields.terms)
        return labels, fields

    async def _list(self, request: Request, media: str, kind: Kind, namespace: str | None) -> Response:
        q = request.query
        labels, fields = self._selectors(request, kind)
        limit = _int_param(q, "limit")
        _int_param(q, "timeoutSeconds")
        result = await self.api.list(kind, namespace, labels, fields, q.get("resourceVersion"),
                                     q.get("resourceVersionMatch"), limit, q.get("continue"))
        if wants_table(request.headers.get("accept", "")):
            objects = [self.api.view(kind, e.decode()) for e in result.entries]
            return self._answer(table(kind.plural, objects, str(result.rv), self.api.clock(), result.continue_token),
                                media)
        meta: dict[str, Any] = {"resourceVersion": str(result.rv)}
        if result.continue_token:
            meta["continue"] = result.continue_token
            if result.remaining is not None:
                meta["remainingItemCount"] = result.remaining
        if kind.to_view:
            items = [self.api.view_raw(kind, e.raw) for e in result.entries]
        else:
            items = [e.raw for e in result.entries]
        head = b'{"kind":"%sList","apiVersion":"%s","metadata":' % (kind.kind.encode(), kind.api_version.encode())
        body = head + _dumps(meta) + b',"items":[' + b",".join(items) + b"]}"
        return self._raw(body, media)

    async def _delete_collection(self, request: Request, media: str, kind: Kind,
                                 namespace: str | None) -> Response:
        labels, fields = self._selectors(request, kind)
        options = self._delete_options(request)
        result = await self.api.list(kind, namespace, labels, fields, None, None, None, None)
        deleted = []
        for entry in result.entries:
            try:
                body, is_object = self.api.delete(kind, entry.namespace, entry.name, options)
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            deleted.append(body if is_object else entry.decode())
        return self._answer({"kind": f"{kind.kind}List", "apiVersion": kind.api_version,
                             "metadata": {"resourceVersion": str(self.api.store.rv)},
                             "items": [self.api.view(kind, o) for o in deleted]}, media)

    # -- watches -----------------------------------------------------------------------------

    async def _watch(self, request: Request, kind: Kind, namespace: str | None,
                     name: str | None = None) -> Stream:
        q = request.query
        labels, fields = self._selectors(request, kind)
        if name is not None:
            fields = parse_fields(f"metadata.name={name}", kind.supports_field)
        timeout = _int_param(q, "timeoutSeconds")
        rv_text = q.get("resourceVersion")
        start_rv: int | None = None
        if rv_text not in (None, "", "0"):
            try:
                start_rv = int(rv_text)
            except ValueError:
                raise ApiError.internal(f'resourceVersion: Invalid value: "{rv_text}": strconv.ParseUint: parsing '
                                        f'"{rv_text}": invalid syntax') from None
        bookmarks = _bool_param(q.get("allowWatchBookmarks")) if "allowWatchBookmarks" in q else False
        flt = Filter(namespace, None if labels.empty else labels, None if fields.empty else fields)
        bucket = self.api.store.buckets[self.api.bucket_name(kind)]
        resp = request.stream(JSON)
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + (timeout if timeout is not None and timeout > 0
                              else self.options.watch_timeout * (1 + self.rng.random()))
        prefix = kind.prefix()
        view = kind.to_view

        as_table = wants_table(request.headers.get("accept", ""))
        shared = not as_table and not view

        def body_of(raw: bytes) -> bytes:
            if as_table:  # kubectl get -w: each event's object is a one-row Table
                obj = self.api.view(kind, orjson.loads(raw))
                return _dumps(table(kind.plural, [obj], obj["metadata"].get("resourceVersion", ""),
                                    self.api.clock()))
            return prefix + (self.api.view_raw(kind, raw) if view else raw)[1:]

        queue = WatchQueue()
        timer: asyncio.TimerHandle | None = None
        forget_gone = request.on_gone(queue.poke)  # a client that leaves ends its watch at once
        try:
            if start_rv is None:
                start_rv = self.api.store.rv
                current = [e for e in bucket.items.values() if flt.matches(e)]
                bucket.watchers.add(queue)
                lines = [b'{"type":"ADDED","object":' + body_of(e.raw) + b"}\n" for e in current]
                if lines:
                    await resp.write(b"".join(lines))
            elif start_rv < bucket.compacted_rv:
                await self._expired(resp, start_rv, bucket.compacted_rv + 1)
                return resp
            else:
                queue.events = bucket.events_from(bucket.index_after(start_rv))
                bucket.watchers.add(queue)
            marks = [deadline - 2.2, deadline - 1.0] if timeout is not None and timeout > 0 else []
            next_mark = marks.pop(0) if marks else started + self.options.bookmark_interval
            stopping = self.stopping()
            self._open_watches.add(queue)
            # the watch waits on its queue alone; a timer of its own pokes it for the deadline, the
            # next bookmark and a look at the connection (at least once a second), re-armed only
            # when it has rung: waking per event costs one future, not a wait() with a timeout
            rang = True

            def ring() -> None:
                nonlocal rang
                rang = True
                queue.poke()
            while True:
                if queue.overflowed:  # this watcher fell too far behind
                    await self._expired(resp, start_rv, bucket.compacted_rv + 1)
                    return resp
                events = queue.take()
                if events:
                    out = [line for ev in events if ev.rv > start_rv
                           for line in (self._line(ev, flt, body_of, shared),) if line is not None]
                    if out:
                        await resp.write(out)
                now = loop.time()
                if now >= deadline:
                    break
                if bookmarks and now >= next_mark:
                    if bucket.last_rv > start_rv:
                        mark = _dumps({"type": "BOOKMARK", "object": kind.bookmark(bucket.last_rv)})
                        await resp.write(mark + b"\n")
                    next_mark = marks.pop(0) if marks else now + self.options.bookmark_interval
                if request.gone or stopping.done():
                    break
                if rang:
                    rang = False
                    timer = loop.call_at(min(deadline, next_mark if bookmarks else deadline, now + 1.0), ring)
                await queue.wake()
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client went away
        finally:
            forget_gone()
            bucket.watchers.discard(queue)
            self._open_watches.discard(queue)
            if timer is not None:
                timer.cancel()
        return resp

    def _line(self, ev: Event, flt: Filter, body_of: Any, shared: bool) -> bytes | None:
        """The watch line of ``ev`` for a watch selecting ``flt`` (None: not for it). ``shared``:
        the watch sends the stored form, so its line is the same bytes as any other such watch's
        of this resource and is encoded once for all of them (kept for the loop iteration that
        wakes them all)."""
        if ev.type == "DELETED":
            if not flt.matches(ev.new):
                return None
            type_ = b"DELETED"
        else:
            now_in = flt.matches(ev.new)
            was_in = ev.prev is not None and flt.matches(ev.prev)
            if not now_in:
                if was_in:  # left the selector: DELETED with the state it had (file 16)
                    return b'{"type":"DELETED","object":' + body_of(ev.prev_at_rv()) + b"}\n"
                return None
            type_ = b"MODIFIED" if was_in else b"ADDED"
        if not shared:
            return b'{"type":"' + type_ + b'","object":' + body_of(ev.new.raw) + b"}\n"
        lines = self._shared_lines
        cached = lines.get((id(ev), type_))
        if cached is not None and cached[0] is ev:
            return cached[1]
        line = b'{"type":"' + type_ + b'","object":' + body_of(ev.new.raw) + b"}\n"
        if not lines:
            asyncio.get_running_loop().call_soon(lines.clear)
        lines[(id(ev), type_)] = (ev, line)
        return line

    @staticmethod
    async def _expired(resp: Stream, rv: int, oldest: int) -> None:
        body = status_body(410, "Expired", f"too old resource version: {rv} ({oldest})")
        await resp.write(_dumps({"type": "ERROR", "object": body}) + b"\n")
        await resp.write_eof()
