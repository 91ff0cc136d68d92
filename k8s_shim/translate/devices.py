"""Dynamic Resource Allocation (resource.k8s.io/v1, structured parameters), as kube-scheduler's
DynamicResources plugin does it: what the informers show (DeviceClasses, ResourceSlices,
ResourceClaims), where a pod's claims can be had, and which devices to give them.

- A ResourceSlice publishes devices of one pool of one driver, for one node (``spec.nodeName``),
  for the nodes of a node selector, or for all nodes. Only a pool's newest generation counts.
- A claim's request asks for ``count`` devices (``ExactCount``) or every device (``All``) of a
  DeviceClass that pass the class's and the request's CEL selectors (:mod:`.cel`).
- A device belongs to one claim at a time: the devices of every allocated claim are taken, and
  so are those the shim has chosen and is writing (``pending``).
- ``plan(pod)`` says what holds the pod back (a claim missing, a class missing, a CEL error: the
  pod waits) and the node requirements its ask carries (``TAG_NODE_REQUIREMENTS``): an allocated
  claim's node selector (reason "resourceclaim not available on the node"), and for the claims
  still unallocated the nodes where all of them can be allocated at once (reason "cannot allocate
  all claims").
- ``allocate(pod, node)`` chooses the devices on the node the core picked: depth first in the
  order of the slices, going back when a later request finds nothing (as kube-scheduler's
  allocator), at most ``SEARCH_STEPS`` devices tried per node.

A pod's claim is ``spec.resourceClaims[].resourceClaimName``, or, from a template
(``resourceClaimTemplateName``), the claim the resourceclaim controller made for it: owned by the
pod (controller ownerReference) with annotation ``resource.kubernetes.io/pod-claim-name``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from k8s_shim.translate.cel import CelError, device_context, matches

__all__ = ["PodClaim", "Device", "DeviceClass", "Request", "Claim", "Devices", "Plan", "read_pod_claims",
           "read_class", "read_slice", "read_claim", "CANNOT_ALLOCATE", "NOT_AVAILABLE", "POD_CLAIM_NAME",
           "DELETE_PROTECTION", "allocation_status", "selector_matches", "node_names"]

CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


@dataclass(frozen=True, slots=True)
class PodClaim:
    name: str  # the pod's name for it (spec.resourceClaims[].name)
    claim: str = ""  # resourceClaimName
    template: str = ""  # resourceClaimTemplateName


def read_pod_claims(spec: dict) -> tuple[PodClaim, ...]:
    return tuple(PodClaim(c.get("name", ""), c.get("resourceClaimName") or "", c.get("resourceClaimTemplateName") or "")
                 for c in spec.get("resourceClaims") or [] if isinstance(c, dict))


# ---------------------------------------------------------------------- what the informers keep
@dataclass(eq=False, slots=True)
class Device:
    driver: str
    pool: str
    name: str
    node: str  # the slice's spec.nodeName ("" for a shared pool)
    node_selector: dict | None  # the slice's spec.nodeSelector
    all_nodes: bool
    raw: dict
    _context: Any = None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.driver, self.pool, self.name

    def context(self) -> Any:
        if self._context is None:  # built when first asked: most devices of a big cluster never are
            self._context = device_context(self.driver, self.raw)
        return self._context


@dataclass(frozen=True, slots=True)
class Slice:
    name: str
    driver: str
    pool: str
    generation: int
    count: int  # spec.pool.resourceSliceCount: the pool is complete once that many slices of its generation are in
    devices: tuple[Device, ...]


def read_slice(raw: dict, old: Any = None) -> tuple[str, Slice]:
    spec = raw.get("spec") or {}
    driver, pool = spec.get("driver") or "", spec.get("pool") or {}
    node, selector, every = spec.get("nodeName") or "", spec.get("nodeSelector"), bool(spec.get("allNodes"))
    devices = tuple(Device(driver, pool.get("name") or "", d.get("name") or "", node, selector, every, d)
                    for d in spec.get("devices") or [] if isinstance(d, dict))
    name = raw["metadata"]["name"]
    return name, Slice(name, driver, pool.get("name") or "", int(pool.get("generation") or 0),
                       int(pool.get("resourceSliceCount") or 1), devices)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    config: tuple[dict, ...] = ()  # spec.config: opaque driver parameters, copied into allocations


def _cel_selectors(selectors: Any) -> tuple[str, ...]:
    return tuple(((s or {}).get("cel") or {}).get("expression") or "" for s in selectors or [] if isinstance(s, dict))


def read_class(raw: dict, old: Any = None) -> tuple[str, DeviceClass]:
    name = raw["metadata"]["name"]
    spec = raw.get("spec") or {}
    return name, DeviceClass(name, _cel_selectors(spec.get("selectors")),
                             tuple(c for c in spec.get("config") or [] if isinstance(c, dict)))


@dataclass(frozen=True, slots=True)
class Request:
    name: str
    device_class: str
    selectors: tuple[str, ...]
    mode: str  # ExactCount | All
    count: int
    problem: str = ""  # what Korral does not handle in it (firstAvailable, adminAccess)


@dataclass(frozen=True, slots=True)
class Claim:
    namespace: str
    name: str
    uid: str
    requests: tuple[Request, ...]
    results: tuple[tuple[str, str, str, str], ...]  # (request, driver, pool, device) of its allocation
    allocated: bool
    node_selector: dict | None  # its allocation's
    reserved: tuple[tuple[str, str], ...]  # (pod name, uid) of status.reservedFor
    owner: str  # the uid of the pod that owns it as controller (a claim made from a template)
    pod_claim: str  # annotation resource.kubernetes.io/pod-claim-name
    deleting: bool
    config: tuple[dict, ...] = ()  # spec.devices.config: opaque driver parameters, copied into its allocation
    problem: str = ""  # what Korral does not allocate in it (spec.devices.constraints)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _request(raw: dict) -> Request:
    name = raw.get("name") or ""
    if raw.get("firstAvailable"):
        return Request(name, "", (), "ExactCount", 0, "firstAvailable (prioritized alternatives)")
    exactly = raw.get("exactly") or {}
    problem = "adminAccess" if exactly.get("adminAccess") else ""
    mode = exactly.get("allocationMode") or "ExactCount"
    return Request(name, exactly.get("deviceClassName") or "", _cel_selectors(exactly.get("selectors")), mode,
                   int(exactly.get("count") or 1), problem)


def read_claim(raw: dict, old: Any = None) -> tuple[str, Claim]:
    meta, spec, status = raw["metadata"], raw.get("spec") or {}, raw.get("status") or {}
    allocation = status.get("allocation") or {}
    results = tuple((r.get("request", ""), r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
                    for r in (allocation.get("devices") or {}).get("results") or [])
    owner = next((r.get("uid", "") for r in meta.get("ownerReferences") or []
                  if r.get("controller") and r.get("kind") == "Pod"), "")
    claim = Claim(meta.get("namespace", ""), meta["name"], meta.get("uid", ""),
                  tuple(_request(r) for r in (spec.get("devices") or {}).get("requests") or []), results,
                  bool(allocation), allocation.get("nodeSelector"),
                  tuple((r.get("name", ""), r.get("uid", "")) for r in status.get("reservedFor") or []),
                  owner, (meta.get("annotations") or {}).get(POD_CLAIM_NAME, ""), bool(meta.get("deletionTimestamp")),
                  tuple(c for c in (spec.get("devices") or {}).get("config") or [] if isinstance(c, dict)),
                  "constraints (matchAttribute)" if (spec.get("devices") or {}).get("constraints") else "")
    return claim.key, claim


# ---------------------------------------------------------------------- node selectors
def _term_matches(term: dict, node: str, labels: dict[str, str]) -> bool:
    for expr in term.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values) or op == "NotIn" and present and labels[key] in values \
                or op == "Exists" and not present or op == "DoesNotExist" and present:
            return False
        if op in ("Gt", "Lt"):
            try:
                have, want = int(labels[key]), int(values[0])
            except (KeyError, IndexError, ValueError):
                return False
            if not (have > want if op == "Gt" else have < want):
                return False
    for expr in term.get("matchFields") or []:
        if expr.get("key") != "metadata.name":
            return False
        inside = node in (expr.get("values") or [])
        if (expr.get("operator") == "In") != inside:
            return False
    return True


def selector_matches(selector: dict | None, node: str, labels: dict[str, str]) -> bool:
    """A NodeSelector (terms ORed); None selects every node."""
    if selector is None:
        return True
    return any(_term_matches(t, node, labels) for t in selector.get("nodeSelectorTerms") or [])


def node_names(names: list[str]) -> dict:
    if not names:
        return {"nodeSelectorTerms": []}  # no term: no node (a matchFields In needs a name)
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": names}]}]}


# ---------------------------------------------------------------------- the book
@dataclass(slots=True)
class Plan:
    waits: list[str] = field(default_factory=list)  # why the pod cannot be placed now (told as constraints)
    errors: list[str] = field(default_factory=list)  # bad input (CEL): a Warning event; the pod waits
    requirements: list[dict] = field(default_factory=list)  # TAG_NODE_REQUIREMENTS entries

    @property
    def uses_devices(self) -> bool:
        return bool(self.waits or self.errors or self.requirements)


Choice = list[tuple[Claim, list[tuple[str, Device]]]]  # per unallocated claim: (request name, device)


@dataclass(slots=True)
class Devices:
    slices: dict[str, Slice] = field(default_factory=dict)
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)  # "ns/name" -> claim
    owned: dict[tuple[str, str], str] = field(default_factory=dict)  # (pod uid, pod claim name) -> "ns/name"
    pending: dict[str, tuple[tuple[str, str, str], ...]] = field(default_factory=dict)  # claim -> devices being written
    _pools: dict[tuple[str, str], int] | None = None  # (driver, pool) -> newest generation
    _local: dict[str, list[Device]] | None = None  # node -> its devices
    _shared: list[Device] | None = None  # devices of pools for several nodes
    _incomplete: set[tuple[str, str]] = field(default_factory=set)  # pools missing slices of their generation
    _matched: dict[tuple[str, int], bool] = field(default_factory=dict)  # (expression, id(device)) -> selected

    # -- changes ------------------------------------------------------------------------------
    def slice_changed(self, old: tuple[str, Slice] | None, new: tuple[str, Slice] | None) -> None:
        if new is None:
            self.slices.pop(old[0], None)
        else:
            self.slices[new[0]] = new[1]
        self._pools = self._local = self._shared = None
        self._matched = {}  # its devices are new objects

    def class_changed(self, old: tuple[str, DeviceClass] | None, new: tuple[str, DeviceClass] | None) -> None:
        if new is None:
            self.classes.pop(old[0], None)
        else:
            self.classes[new[0]] = new[1]

    def claim_changed(self, old: tuple[str, Claim] | None, new: tuple[str, Claim] | None) -> None:
        if old is not None:
            claim = old[1]
            self.claims.pop(old[0], None)
            if new is None:
                self.pending.pop(old[0], None)
            if claim.owner:
                self.owned.pop((claim.owner, claim.pod_claim), None)
        if new is not None:
            claim = new[1]
            self.claims[new[0]] = claim
            if claim.owner and claim.pod_claim:
                self.owned[(claim.owner, claim.pod_claim)] = new[0]
            if claim.allocated:
                self.pending.pop(new[0], None)  # its devices are now taken by the allocation itself

    # -- reading -------------------------------------------------------------------------------
    def _index(self) -> None:
        pools: dict[tuple[str, str], int] = {}
        for s in self.slices.values():
            pools[(s.driver, s.pool)] = max(pools.get((s.driver, s.pool), 0), s.generation)
        local: dict[str, list[Device]] = {}
        shared: list[Device] = []
        seen: dict[tuple[str, str], int] = {}
        wanted: dict[tuple[str, str], int] = {}
        for name in sorted(self.slices):
            s = self.slices[name]
            if s.generation != pools[(s.driver, s.pool)]:
                continue  # an older generation of the pool, being replaced
            seen[(s.driver, s.pool)] = seen.get((s.driver, s.pool), 0) + 1
            wanted[(s.driver, s.pool)] = s.count
            for d in s.devices:
                if d.node:
                    local.setdefault(d.node, []).append(d)
                else:
                    shared.append(d)
        self._pools, self._local, self._shared = pools, local, shared
        self._incomplete = {p for p, n in seen.items() if n < wanted[p]}

    def devices_on(self, node: str, labels: dict[str, str]) -> list[Device]:
        if self._local is None:
            self._index()
        return self._local.get(node, []) + [d for d in self._shared
                                            if d.all_nodes or selector_matches(d.node_selector, node, labels)]

    def taken(self) -> set[tuple[str, str, str]]:
        out = {(drv, pool, dev) for c in self.claims.values() for _, drv, pool, dev in c.results}
        for keys in self.pending.values():
            out.update(keys)
        return out

    def pod_claim(self, pod_uid: str, namespace: str, pc: PodClaim) -> Claim | None:
        if pc.claim:
            return self.claims.get(f"{namespace}/{pc.claim}")
        key = self.owned.get((pod_uid, pc.name))
        return self.claims.get(key) if key else None

    def claim_keys(self, pod_uid: str, namespace: str, pod_claims: tuple[PodClaim, ...]) -> set[str]:
        out = set()
        for pc in pod_claims:
            claim = self.pod_claim(pod_uid, namespace, pc)
            out.add(claim.key if claim else (f"{namespace}/{pc.claim}" if pc.claim else f"{pod_uid}/{pc.name}"))
        return out

    # -- deciding ------------------------------------------------------------------------------
    def plan(self, pod_uid: str, namespace: str, pod_claims: tuple[PodClaim, ...],
             nodes: dict[str, dict[str, str]]) -> Plan:
        """What the pod's claims mean for its ask now (see the module doc); ``nodes``: name -> labels."""
        out = Plan()
        unallocated: list[Claim] = []
        for pc in pod_claims:
            claim = self.pod_claim(pod_uid, namespace, pc)
            if claim is None:
                out.waits.append(f'resourceclaim "{pc.claim}" not found' if pc.claim else
                                 f'waiting for the resourceclaim of "{pc.name}" (template "{pc.template}") to be '
                                 "created")
            elif claim.deleting:
                out.waits.append(f'resourceclaim "{claim.name}" is being deleted')
            elif claim.allocated:
                if claim.node_selector is not None:
                    out.requirements.append({"reason": NOT_AVAILABLE, "nodeSelector": claim.node_selector,
                                             "retry": False})
            else:
                if claim.problem:
                    out.waits.append(f'resourceclaim "{claim.name}": Korral does not allocate {claim.problem}')
                for request in claim.requests:
                    if request.problem:
                        out.waits.append(f'resourceclaim "{claim.name}" request "{request.name}": Korral does not '
                                         f"allocate {request.problem}")
                    elif request.device_class not in self.classes:
                        out.waits.append(f'resourceclaim "{claim.name}" request "{request.name}": device class '
                                         f'"{request.device_class}" does not exist')
                unallocated.append(claim)
        if out.waits or not unallocated:
            return out
        taken = self.taken()
        fits = []
        for node in sorted(nodes):
            choice = self._choose(unallocated, node, nodes[node], taken, out.errors, namespace)
            if out.errors:
                return out
            if choice is not None:
                fits.append(node)
        out.requirements.append({"reason": CANNOT_ALLOCATE, "nodeSelector": node_names(fits), "retry": True})
        return out

    def allocate(self, pod_uid: str, namespace: str, pod_claims: tuple[PodClaim, ...], node: str,
                 labels: dict[str, str]) -> Choice | None:
        """The devices for the pod's unallocated claims on ``node``; None if they cannot be had."""
        claims = [c for pc in pod_claims if (c := self.pod_claim(pod_uid, namespace, pc)) is not None
                  and not c.allocated]
        errors: list[str] = []
        choice = self._choose(claims, node, labels, self.taken(), errors, namespace)
        return None if errors else choice

    def _choose(self, claims: list[Claim], node: str, labels: dict[str, str], taken: set, errors: list[str],
                namespace: str) -> Choice | None:
        available = self.devices_on(node, labels)
        if not available:
            return None if any(c.requests for c in claims) else [(c, []) for c in claims]
        used = set(taken)
        fixed: list[tuple[int, str, Device]] = []  # All requests: every matching device, no choice
        slots: list[tuple[int, str, int, list[Device]]] = []  # one per device of an ExactCount request
        for ci, claim in enumerate(claims):
            for j, request in enumerate(claim.requests):
                cls = self.classes[request.device_class]
                wanted = [(f"deviceclass {cls.name} spec.selectors[{i}].cel.expression", e)
                          for i, e in enumerate(cls.selectors)]
                wanted += [(f"spec.devices.requests[{j}].exactly.selectors[{i}].cel.expression", e)
                           for i, e in enumerate(request.selectors)]
                try:
                    fitting = [d for d in available if all(self._matches(e, d) for _, e in wanted)]
                except CelError:
                    errors.append(f'resourceclaim {namespace}/{claim.name} request "{request.name}": '
                                  + self._cel_problem(wanted, available))
                    return None
                if request.mode == "All":  # every device: not while a pool is being republished
                    if not fitting or any(d.key in used or (d.driver, d.pool) in self._incomplete for d in fitting):
                        return None
                    for d in fitting:
                        used.add(d.key)
                        fixed.append((ci, request.name, d))
                    continue
                free = [d for d in fitting if d.key not in used]
                if len(free) < request.count:
                    return None
                slots += [(ci, request.name, k, free) for k in range(request.count)]
        picked = _search(slots, used)
        if picked is None:
            return None
        out: Choice = [(claim, []) for claim in claims]
        for ci, request_name, device in fixed + picked:
            out[ci][1].append((request_name, device))
        return out

    def _matches(self, expression: str, device: Device) -> bool:
        key = (expression, id(device))
        cached = self._matched.get(key)
        if cached is None:
            cached = self._matched[key] = matches(expression, device.context())
        return cached

    @staticmethod
    def _cel_problem(wanted: list[tuple[str, str]], devices: list[Device]) -> str:
        """The first expression that fails, where, and why."""
        for where, expression in wanted:
            for d in devices:
                try:
                    matches(expression, d.context())
                except CelError as exc:
                    return f'{where}: "{expression}": {exc} (device {d.driver}/{d.pool}/{d.name})'
        return "a CEL selector failed"


SEARCH_STEPS = 10_000  # devices tried per node before giving up on it (kube-scheduler bounds its search too)


def _search(slots: list[tuple[int, str, int, list[Device]]], used: set) -> list[tuple[int, str, Device]] | None:
    """Devices for every slot, each device once: depth first in the order of the slices, going
    back when a later slot finds nothing (a request that took a device another needs gives it up).
    The devices of one request are taken in order, so the same set is not tried twice."""
    chosen: list[tuple[int, str, Device]] = []
    steps = 0

    def fill(i: int, start: int) -> bool:
        nonlocal steps
        if i == len(slots):
            return True
        ci, name, k, candidates = slots[i]
        begin = start if k > 0 else 0  # the next device of the same request comes after the last one
        for index in range(begin, len(candidates)):
            d = candidates[index]
            steps += 1
            if steps > SEARCH_STEPS:
                return False
            if d.key in used:
                continue
            used.add(d.key)
            chosen.append((ci, name, d))
            nxt = slots[i + 1] if i + 1 < len(slots) else None
            same = nxt is not None and nxt[0] == ci and nxt[1] == name and nxt[2] == k + 1
            if fill(i + 1, index + 1 if same else 0):
                return True
            chosen.pop()
            used.discard(d.key)
        return False
    return chosen if fill(0, 0) else None


def allocation_status(choice: list[tuple[str, Device]], node: str, claim: Claim | None = None,
                      classes: dict[str, DeviceClass] | None = None) -> dict:
    """status.allocation for a claim's chosen devices: results, the configuration of their classes
    (source FromClass, per request) then the claim's own (FromClaim), and the nodes they can be
    used on (the node for a node's own devices, else the pool's node selector, else every node)."""
    results = [{"request": r, "driver": d.driver, "pool": d.pool, "device": d.name} for r, d in choice]
    devices: dict[str, Any] = {"results": results}
    config = []
    for request in claim.requests if claim is not None else ():
        cls = (classes or {}).get(request.device_class)
        for entry in cls.config if cls is not None else ():
            config.append({"source": "FromClass", "requests": [request.name], **entry})
    for entry in claim.config if claim is not None else ():
        config.append({"source": "FromClaim", **entry})
    if config:
        devices["config"] = config
    out: dict[str, Any] = {"devices": devices}
    if any(d.node for _, d in choice):
        out["nodeSelector"] = node_names([node])
    else:
        selector = next((d.node_selector for _, d in choice if d.node_selector is not None), None)
        if selector is not None:
            out["nodeSelector"] = selector
    return out
