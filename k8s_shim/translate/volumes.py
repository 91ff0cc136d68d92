"""The volumes pods use, what they require of a node, and how a pod's unbound claims get theirs.

``Volumes`` keeps what the informers show: claims, persistent volumes (PVs), storage classes and
the CSI drivers' per-node volume limits (CSINodes), and which pods use which claim. For a pod it
answers, as kube-scheduler's volume plugins would:

- ``waits``: what holds the pod back whatever the node: a claim that does not exist or is being
  deleted, an unbound claim of an immediate-binding class (until its volume is bound);
- ``requirements``: the node selectors its claims impose (tag ``korral.io/node-requirements``):
  a bound claim's PV node affinity (VolumeBinding) and its zone/region labels (VolumeZone); an
  unbound ``WaitForFirstConsumer`` claim's nodes: those of an available PV it could bind (same
  class, enough capacity, its access modes) or, if its class provisions, the class's
  ``allowedTopologies`` (none: every node); a ``ReadWriteOncePod`` claim in use by another placed
  pod (VolumeRestrictions) matches no node until that pod ends, as a claim bound to a PV that does
  not exist;
- ``plan``: for the node the core chose, what to write before the pod's binding: a PV's
  ``claimRef`` (a static volume) or the claim's ``volume.kubernetes.io/selected-node`` (to be
  provisioned), as kube-scheduler's volume binder does;
- ``attach_counts``: the CSI volumes it attaches per driver (NodeVolumeLimits), asked for as the
  counted resource ``attachable-volumes-csi-<driver>`` that ``node_limits`` gives each node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from k8s_shim.translate import quantity

__all__ = ["Claim", "Volume", "StorageClass", "Step", "Volumes", "NO_PROVISIONER", "RWOP", "read_claim", "read_volume",
           "read_storage_class", "read_csinode", "matches_terms", "attach_resource",
           "AFFINITY_CONFLICT", "NO_PV", "NO_VOLUME", "NO_ZONE", "RWOP_CONFLICT", "SELECTED_NODE"]

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
RWOP = "ReadWriteOncePod"
ZONE_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region",
               "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region")
ATTACH_PREFIX = "attachable-volumes-csi-"
UNLIMITED = 1 << 31  # a node whose CSINode gives a limited driver no count attaches its volumes without limit
# kube-scheduler's words
AFFINITY_CONFLICT = "node(s) had volume node affinity conflict"
NO_VOLUME = "node(s) didn't find available persistent volumes to bind"
NO_ZONE = "node(s) had no available volume zone"
RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
NO_PV = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
# a selector no node matches (a label both present and absent): what waiting alone can change
NO_NODE = {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "kubernetes.io/hostname", "operator": "Exists"},
    {"key": "kubernetes.io/hostname", "operator": "DoesNotExist"}]}]}


@dataclass(frozen=True, slots=True)
class Claim:
    bound: bool
    storage_class: str
    deleting: bool
    uid: str = ""
    volume: str = ""  # spec.volumeName
    request: int = 0  # bytes of storage asked for
    access_modes: tuple[str, ...] = ()
    selected_node: str = ""


@dataclass(frozen=True, slots=True)
class Volume:
    name: str
    storage_class: str
    capacity: int
    access_modes: tuple[str, ...]
    terms: tuple[dict, ...] | None  # spec.nodeAffinity.required.nodeSelectorTerms (None: any node)
    zones: tuple[tuple[str, tuple[str, ...]], ...]  # (zone/region label, its values) of the PV's labels
    phase: str
    claim: str = ""  # claimRef "ns/name" ("" none)
    claim_uid: str = ""
    driver: str = ""  # spec.csi.driver


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    binding_mode: str = "Immediate"
    provisioner: str = ""
    topologies: tuple[dict, ...] = ()  # allowedTopologies as node selector terms (none: every node)

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != NO_PROVISIONER


@dataclass(frozen=True, slots=True)
class Step:
    """One write before a pod's binding: pre-bind PV ``volume`` to ``claim`` (static), or give
    ``claim`` its node (``volume`` empty: provisioned)."""
    claim: str  # "ns/name"
    claim_uid: str
    volume: str = ""


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _bytes(text: Any) -> int:
    try:
        return quantity.value(str(text))
    except (ValueError, ArithmeticError):
        return 0


def read_claim(raw: dict, old=None) -> tuple[str, Claim]:
    meta, spec, status = raw["metadata"], raw.get("spec") or {}, raw.get("status") or {}
    bound = bool(spec.get("volumeName")) or status.get("phase") == "Bound"
    requests = (spec.get("resources") or {}).get("requests") or {}
    return (_key(meta.get("namespace", ""), meta["name"]),
            Claim(bound, spec.get("storageClassName") or "", bool(meta.get("deletionTimestamp")),
                  meta.get("uid", ""), spec.get("volumeName") or "", _bytes(requests.get("storage", 0)),
                  tuple(spec.get("accessModes") or ()), (meta.get("annotations") or {}).get(SELECTED_NODE, "")))


def read_volume(raw: dict, old=None) -> tuple[str, Volume]:
    meta, spec, status = raw["metadata"], raw.get("spec") or {}, raw.get("status") or {}
    required = (spec.get("nodeAffinity") or {}).get("required")
    terms = tuple(required.get("nodeSelectorTerms") or ()) if required else None
    labels = meta.get("labels") or {}
    zones = tuple((k, tuple(v for v in labels[k].split("__") if v)) for k in ZONE_LABELS if labels.get(k))
    ref = spec.get("claimRef") or {}
    claim = _key(ref.get("namespace", ""), ref["name"]) if ref.get("name") else ""
    return (meta["name"], Volume(meta["name"], spec.get("storageClassName") or "", _bytes(
        (spec.get("capacity") or {}).get("storage", 0)), tuple(spec.get("accessModes") or ()), terms, zones,
        status.get("phase", "Pending"), claim, ref.get("uid", ""), (spec.get("csi") or {}).get("driver", "")))


def read_storage_class(raw: dict, old=None) -> tuple[str, StorageClass]:
    name = raw["metadata"]["name"]
    terms = []
    for topology in raw.get("allowedTopologies") or ():
        exprs = [{"key": e.get("key", ""), "operator": "In", "values": list(e.get("values") or ())}
                 for e in topology.get("matchLabelExpressions") or ()]
        if exprs:
            terms.append({"matchExpressions": exprs})
    return name, StorageClass(name, raw.get("volumeBindingMode") or "Immediate", raw.get("provisioner") or "",
                              tuple(terms))


def read_csinode(raw: dict, old=None) -> tuple[str, dict[str, int]]:
    """A node's CSI volume limits: driver -> ``allocatable.count`` (drivers without one: no limit)."""
    limits = {}
    for driver in (raw.get("spec") or {}).get("drivers") or ():
        count = (driver.get("allocatable") or {}).get("count")
        if isinstance(count, int) and count >= 0 and driver.get("name"):
            limits[driver["name"]] = count
    return raw["metadata"]["name"], limits


def attach_resource(driver: str) -> str:
    return ATTACH_PREFIX + driver


# ---------------------------------------------------------------------------- node terms
def _expression(expr: dict, value: str | None) -> bool:
    op, values = expr.get("operator"), expr.get("values") or ()
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def matches_terms(terms: tuple[dict, ...] | list[dict] | None, labels: dict[str, str], node: str) -> bool:
    """Whether a node (its labels and name) matches node selector terms (ORed; None: any node)."""
    if terms is None:
        return True
    for term in terms:
        exprs, fields = term.get("matchExpressions") or (), term.get("matchFields") or ()
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_expression(e, labels.get(e.get("key", ""))) for e in exprs) and \
                all(_expression(f, node if f.get("key") == "metadata.name" else None) for f in fields):
            return True
    return False


def _merged(terms: list[dict]) -> list[dict]:
    """``terms`` (ORed) with those that are one ``In`` on the same label merged into one (their
    values joined): local volumes' ``hostname In [node]`` become one term naming every node."""
    single: dict[str, list[str]] = {}
    rest = []
    for term in terms:
        exprs = term.get("matchExpressions") or ()
        if len(exprs) == 1 and not term.get("matchFields") and exprs[0].get("operator") == "In" and len(term) == 1:
            values = single.setdefault(exprs[0].get("key", ""), [])
            values.extend(v for v in exprs[0].get("values") or () if v not in values)
        else:
            rest.append(term)
    return [{"matchExpressions": [{"key": k, "operator": "In", "values": v}]} for k, v in single.items()] + rest


def _requirement(reason: str, terms: list[dict] | tuple[dict, ...], retry: bool) -> dict:
    return {"reason": reason, "nodeSelector": {"nodeSelectorTerms": list(terms)}, "retry": retry}


@dataclass(slots=True)
class Volumes:
    claims: dict[str, Claim] = field(default_factory=dict)  # "ns/name" -> claim
    volumes: dict[str, Volume] = field(default_factory=dict)  # PV name -> PV
    storage_classes: dict[str, StorageClass] = field(default_factory=dict)
    limits: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> driver -> volumes it attaches
    users: dict[str, set[str]] = field(default_factory=dict)  # "ns/name" -> uids of the pods using it
    assumed: dict[str, str] = field(default_factory=dict)  # PV name -> claim being pre-bound to it
    selecting: dict[str, str] = field(default_factory=dict)  # claim -> node it is being given (provisioning)
    withdrawn: dict[str, str] = field(default_factory=dict)  # claim -> node taken back, until the informer agrees
    by_class: dict[str, set[str]] = field(default_factory=dict)  # storage class -> its PVs
    prebound: dict[str, set[str]] = field(default_factory=dict)  # claim -> PVs whose claimRef names it
    # (class, request, access modes) -> the distinct node terms of the PVs anyone may bind, and
    # whether one of them has no node affinity: the same for every claim of that shape, dropped
    # when a PV of the class (or what is assumed) changes
    _open: dict[tuple[str, int, tuple[str, ...]], tuple[list[dict], bool]] = field(default_factory=dict)

    def use(self, uid: str, namespace: str, claims: tuple[str, ...]) -> None:
        for name in claims:
            self.users.setdefault(_key(namespace, name), set()).add(uid)

    def release(self, uid: str, namespace: str, claims: tuple[str, ...]) -> set[str]:
        """Forget ``uid``'s use of its claims; the other users of those claims (to look at again)."""
        others: set[str] = set()
        for name in claims:
            users = self.users.get(_key(namespace, name))
            if users is not None:
                users.discard(uid)
                others |= users
                if not users:
                    del self.users[_key(namespace, name)]
        return others

    def _class(self, claim: Claim) -> StorageClass | None:
        return self.storage_classes.get(claim.storage_class)

    def _unbound_wffc(self, claim: Claim) -> bool:
        cls = self._class(claim)
        return not claim.bound and cls is not None and cls.binding_mode == WAIT_FOR_FIRST_CONSUMER

    def waits(self, namespace: str, claims: tuple[str, ...]) -> list[str]:
        found = []
        for name in claims:
            claim = self.claims.get(_key(namespace, name))
            if claim is None:
                found.append(f"persistentvolumeclaim {name} not found")
            elif claim.deleting:
                found.append(f"persistentvolumeclaim {name} is being deleted")
            elif not claim.bound and not self._unbound_wffc(claim):
                found.append(f"unbound immediate persistentvolumeclaim {name}")
        return found

    def to_place(self, namespace: str, claims: tuple[str, ...]) -> tuple[str, ...]:
        """The unbound WaitForFirstConsumer claims among ``claims``."""
        return tuple(n for n in claims if (c := self.claims.get(_key(namespace, n))) is not None
                     and self._unbound_wffc(c))

    def _prebinding(self, key: str) -> bool:
        """Whether a PV is being pre-bound to the claim (another pod of it chose one)."""
        return key in self.assumed.values()

    @staticmethod
    def _fits(pv: Volume, claim: Claim) -> bool:
        return pv.storage_class == claim.storage_class and pv.capacity >= claim.request \
            and set(claim.access_modes) <= set(pv.access_modes)

    def _open_to(self, pv: Volume) -> bool:
        """Available to any claim: no claimRef, Available, not being pre-bound."""
        return not pv.claim and pv.phase == "Available" and pv.name not in self.assumed

    def _candidates(self, key: str, claim: Claim) -> list[Volume]:
        """The PVs ``claim`` (unbound) could bind: pre-bound to it, or available to anyone (only
        the one being pre-bound to it, when there is one: another pod of the claim chose it)."""
        mine = [self.volumes[pv] for pv, k in self.assumed.items() if k == key and pv in self.volumes]
        if mine:
            return mine
        out = [self.volumes[n] for n in self.prebound.get(key, ()) if n in self.volumes]
        out = [pv for pv in out if (not pv.claim_uid or pv.claim_uid == claim.uid) and self._fits(pv, claim)]
        for name in self.by_class.get(claim.storage_class, ()):
            pv = self.volumes[name]
            if self._open_to(pv) and self._fits(pv, claim):
                out.append(pv)
        return out

    def _static_terms(self, key: str, claim: Claim) -> tuple[list[dict], bool]:
        """The node terms of the PVs ``claim`` could bind (distinct), and whether one of them
        fits any node: those available to anyone memoised per claim shape."""
        if self._prebinding(key):
            pvs = self._candidates(key, claim)
            return [t for pv in pvs for t in pv.terms or ()], any(pv.terms is None for pv in pvs)
        shape = (claim.storage_class, claim.request, claim.access_modes)
        found = self._open.get(shape)
        if found is None:
            terms: dict[bytes, dict] = {}
            anywhere = False
            for name in sorted(self.by_class.get(claim.storage_class, ())):
                pv = self.volumes[name]
                if self._open_to(pv) and self._fits(pv, claim):
                    anywhere = anywhere or pv.terms is None
                    for term in pv.terms or ():
                        terms.setdefault(orjson.dumps(term, option=orjson.OPT_SORT_KEYS), term)
            found = self._open[shape] = (_merged(list(terms.values())), anywhere)
        terms, anywhere = found
        own = [self.volumes[n] for n in sorted(self.prebound.get(key, ())) if n in self.volumes]
        own = [pv for pv in own if (not pv.claim_uid or pv.claim_uid == claim.uid) and self._fits(pv, claim)]
        if own:
            terms = [t for pv in own for t in pv.terms or ()] + terms
            anywhere = anywhere or any(pv.terms is None for pv in own)
        return terms, anywhere

    def requirements(self, namespace: str, claims: tuple[str, ...], rwop_in_use: set[str] = frozenset()) -> list[dict]:
        """The node requirements of a pod's claims (see the module doc); ``rwop_in_use``: the
        "ns/name" of ReadWriteOncePod claims another placed pod uses."""
        out: list[dict] = []
        for name in claims:
            key = _key(namespace, name)
            claim = self.claims.get(key)
            if claim is None or claim.deleting:
                continue  # a wait
            if key in rwop_in_use and RWOP in claim.access_modes:
                out.append(_requirement(RWOP_CONFLICT, NO_NODE["nodeSelectorTerms"], True))
            if claim.bound:
                pv = self.volumes.get(claim.volume)
                if pv is None:
                    if claim.volume:  # its volume is not there (yet): no node can mount it
                        out.append(_requirement(NO_PV, NO_NODE["nodeSelectorTerms"], True))
                    continue
                if pv.terms is not None:
                    out.append(_requirement(AFFINITY_CONFLICT, pv.terms, False))
                for label, values in pv.zones:
                    out.append(_requirement(NO_ZONE, [{"matchExpressions": [
                        {"key": label, "operator": "In", "values": list(values)}]}], False))
            elif self._unbound_wffc(claim):
                terms, anywhere = self._static_terms(key, claim)
                terms = list(terms)
                cls = self._class(claim)
                chosen = self._selected(key, claim)
                if self._prebinding(key):
                    pass  # its volume is chosen: only that PV's nodes
                elif chosen and cls is not None and cls.provisions:  # another pod of the claim chose its node
                    terms.append({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [chosen]}]})
                elif cls is not None and cls.provisions:
                    if not cls.topologies:
                        anywhere = True
                    terms.extend(cls.topologies)
                if anywhere:
                    continue
                out.append(_requirement(NO_VOLUME, terms or NO_NODE["nodeSelectorTerms"], True))
        return out

    def plan(self, namespace: str, claims: tuple[str, ...], node: str, labels: dict[str, str]) -> list[Step] | None:
        """The writes that give the pod's unbound WaitForFirstConsumer claims a volume on ``node``
        (the smallest fitting PV, else provisioning there); None when one of them cannot have one
        there any more."""
        steps = []
        for name in self.to_place(namespace, claims):
            key = _key(namespace, name)
            claim = self.claims[key]
            fits = [pv for pv in self._candidates(key, claim) if matches_terms(pv.terms, labels, node)]
            if fits:
                pv = min(fits, key=lambda v: (v.claim != key, v.capacity, v.name))
                if pv.claim != key:  # one pre-bound to it already: the PV binder completes that
                    self.assumed[pv.name] = key
                    self._open.clear()
                    steps.append(Step(key, claim.uid, pv.name))
                continue
            cls = self._class(claim)
            chosen = self._selected(key, claim)
            if self._prebinding(key) or cls is None or not cls.provisions or (chosen and chosen != node) or \
                    (cls.topologies and not matches_terms(cls.topologies, labels, node)):
                self.forget(steps)  # none of it is done
                return None
            self.selecting[key] = node
            steps.append(Step(key, claim.uid))
        return steps

    def _selected(self, key: str, claim: Claim) -> str:
        """The node the claim is given (being given) for provisioning; "" none."""
        selected = claim.selected_node
        if selected and self.withdrawn.get(key) == selected:
            selected = ""
        return selected or self.selecting.get(key, "")

    def withdraw(self, steps: list[Step], node: str) -> None:
        """The selected node of ``steps``' claims is being taken back."""
        for step in steps:
            if not step.volume:
                self.withdrawn[step.claim] = node

    def forget(self, steps: list[Step]) -> None:
        """The pre-binds of ``steps`` are over (done and seen, or given up)."""
        for step in steps:
            if step.volume and self.assumed.get(step.volume) == step.claim:
                del self.assumed[step.volume]
                self._open.clear()
            elif not step.volume:
                self.selecting.pop(step.claim, None)

    def unbound(self, namespace: str, claims: tuple[str, ...]) -> tuple[bool, str] | None:
        """None when every claim is bound; else (whether waiting cannot help, what is waited for)."""
        for name in claims:
            claim = self.claims.get(_key(namespace, name))
            if claim is None:
                return True, f"persistentvolumeclaim {name} was deleted"
            if claim.deleting:
                return True, f"persistentvolumeclaim {name} is being deleted"
            if not claim.bound:
                return False, f"persistentvolumeclaim {name} to be bound"
        return None

    def attach_counts(self, namespace: str, claims: tuple[str, ...]) -> dict[str, int]:
        """The CSI volumes the pod attaches, per limited driver: its distinct claims whose PV is a
        CSI volume (an unbound claim: its class's provisioner)."""
        counts: dict[str, int] = {}
        for name in dict.fromkeys(claims):
            claim = self.claims.get(_key(namespace, name))
            if claim is None:
                continue
            driver = ""
            if claim.bound and claim.volume in self.volumes:
                driver = self.volumes[claim.volume].driver
            elif not claim.bound and (cls := self._class(claim)) is not None and cls.provisions:
                driver = cls.provisioner
            if driver:
                counts[driver] = counts.get(driver, 0) + 1
        limited = self.limited()
        return {attach_resource(d): n for d, n in counts.items() if d in limited}

    def limited(self) -> set[str]:
        """The drivers some node limits: only their volumes are counted."""
        return {d for limits in self.limits.values() for d in limits}

    def node_limits(self, node: str) -> dict[str, int]:
        """The node's counted resources: per limited driver, its count (no count: unlimited)."""
        mine = self.limits.get(node, {})
        return {attach_resource(d): mine.get(d, UNLIMITED) for d in self.limited()}

    # -- what the informers show -------------------------------------------------------------
    def claim_changed(self, old: tuple[str, Claim] | None, new: tuple[str, Claim] | None) -> set[str]:
        if new is None:
            self.claims.pop(old[0], None)
            self.withdrawn.pop(old[0], None)
            self.selecting.pop(old[0], None)
            return set(self.users.get(old[0], ()))
        self.claims[new[0]] = new[1]
        if self.withdrawn.get(new[0], new[1].selected_node) != new[1].selected_node:
            del self.withdrawn[new[0]]  # the informer shows it taken back (or given anew)
        if new[1].bound:
            self.selecting.pop(new[0], None)
            for pv, key in list(self.assumed.items()):
                if key == new[0]:
                    del self.assumed[pv]
                    self._open.clear()
        return set(self.users.get(new[0], ()))

    def _everyone(self) -> set[str]:
        return {uid for uids in self.users.values() for uid in uids}

    def volume_changed(self, old: tuple[str, Volume] | None, new: tuple[str, Volume] | None) -> set[str]:
        """The pods to look at again: those of the claims bound to it, or unbound of its class."""
        for side, index in ((old, False), (new, True)):
            if side is None:
                continue
            pv = side[1]
            self._open = {k: v for k, v in self._open.items() if k[0] != pv.storage_class}
            for table, at in ((self.by_class, pv.storage_class), (self.prebound, pv.claim)):
                if not at:
                    continue
                if index:
                    table.setdefault(at, set()).add(pv.name)
                elif at in table:
                    table[at].discard(pv.name)
                    if not table[at]:
                        del table[at]
        if new is None:
            self.volumes.pop(old[0], None)
        else:
            self.volumes[new[0]] = new[1]
        name = (new or old)[0]
        classes = {v[1].storage_class for v in (old, new) if v is not None}
        out: set[str] = set()
        for key, uids in self.users.items():
            claim = self.claims.get(key)
            if claim is not None and (claim.volume == name or (not claim.bound and claim.storage_class in classes)):
                out |= uids
        return out

    def storage_class_changed(self, old: tuple[str, StorageClass] | None,
                              new: tuple[str, StorageClass] | None) -> set[str]:
        if new is None:
            self.storage_classes.pop(old[0], None)
        else:
            self.storage_classes[new[0]] = new[1]
        return self._everyone()

    def csinode_changed(self, old: tuple[str, dict] | None, new: tuple[str, dict] | None) -> tuple[bool, str]:
        """(whether the set of limited drivers changed: every node and pod to look at again, the
        node whose limits changed)."""
        before = self.limited()
        if new is None:
            self.limits.pop(old[0], None)
        else:
            self.limits[new[0]] = new[1]
        return self.limited() != before, (new or old)[0]
