"""Every resource the double serves, each with its strategy (:mod:`.kinds`, :mod:`.pods`,
:mod:`.events`): above them all, so none of them needs the others' list."""

from __future__ import annotations

from k8s_shim.fake.dra import DRA_KINDS
from k8s_shim.fake.events import CoreEvents, Events
from k8s_shim.fake.kinds import (ConfigMaps, CSINodes, Kind, Leases, Namespaces, Nodes, PersistentVolumeClaims,
                                    PersistentVolumes, PriorityClasses, StorageClasses, plain_kind)
from k8s_shim.fake.pods import Pods
from k8s_shim.fake.workloads import RUNTIME_CONFIG, WORKLOAD_KINDS

__all__ = ["all_kinds"]


def all_kinds(runtime_config: frozenset[str] = frozenset()) -> list[Kind]:
    """``runtime_config``: kube-apiserver's ``--runtime-config`` entries that turn on groups off by
    default (``scheduling.k8s.io/v1alpha2=true``: Workload and PodGroup, and pods' schedulingGroup)."""
    classes: list[type[Kind]] = [
        Namespaces, Nodes, Pods, ConfigMaps, CoreEvents, PersistentVolumeClaims, PersistentVolumes,
        plain_kind("services", "Service", short=("svc",), storage_hash="0/CO1lhkEBI=", status=True,
                   categories=("all",)),
        plain_kind("replicationcontrollers", "ReplicationController", short=("rc",), storage_hash="Jond2If31h0=",
                   status=True, generation=True, categories=("all",)),
        plain_kind("serviceaccounts", "ServiceAccount", short=("sa",), storage_hash="pbx9ZvyFpBE="),
        plain_kind("secrets", "Secret", storage_hash="S6u1pOWzb84="),
        plain_kind("resourcequotas", "ResourceQuota", short=("quota",), storage_hash="8uhSgffRX6w=", status=True),
        plain_kind("limitranges", "LimitRange", short=("limits",), storage_hash="EBKMFVe6cwo="),
        Events, PriorityClasses, Leases, StorageClasses,
        CSINodes,
        plain_kind("csidrivers", "CSIDriver", "storage.k8s.io", namespaced=False, storage_hash="hL6j/rwBV5w="),
        plain_kind("csistoragecapacities", "CSIStorageCapacity", "storage.k8s.io", storage_hash="xeVl+2Ly1kE="),
        plain_kind("volumeattachments", "VolumeAttachment", "storage.k8s.io", namespaced=False,
                   storage_hash="tJx/ezt6UDU=", status=True),
        plain_kind("deployments", "Deployment", "apps", short=("deploy",), storage_hash="8aSe+NMegvE=", status=True,
                   generation=True, categories=("all",)),
        plain_kind("replicasets", "ReplicaSet", "apps", short=("rs",), storage_hash="P1RzHs8/mWQ=", status=True,
                   generation=True, categories=("all",)),
        plain_kind("statefulsets", "StatefulSet", "apps", short=("sts",), storage_hash="H+vl74LkKdo=", status=True,
                   generation=True, categories=("all",)),
        plain_kind("daemonsets", "DaemonSet", "apps", short=("ds",), storage_hash="dd7pWHUlMKQ=", status=True,
                   generation=True, categories=("all",)),
        plain_kind("jobs", "Job", "batch", storage_hash="mudhfqk/qZY=", status=True, generation=True,
                   categories=("all",)),
        plain_kind("poddisruptionbudgets", "PodDisruptionBudget", "policy", short=("pdb",),
                   storage_hash="6BGBu0kpHtk=", status=True, generation=True),
        *DRA_KINDS,
    ]
    workloads = RUNTIME_CONFIG in runtime_config
    if workloads:
        classes += WORKLOAD_KINDS
    kinds = [cls() for cls in classes]
    for kind in kinds:
        if isinstance(kind, Pods):
            kind.scheduling_group = workloads
    return kinds
