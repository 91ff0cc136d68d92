"""The ``si/...`` constants of the Scheduler Interface spec (seed 000), in one place, plus the
tag and attribute names the core reads (YuniKorn's, the k8s shim's, and Korral's own).

No imports of other project packages: the pure core may import this module.
"""

from __future__ import annotations

__all__ = [
    "ARCH", "HOST_NAME", "RACK_NAME", "OS", "INSTANCE_TYPE", "FAILURE_DOMAIN_ZONE", "FAILURE_DOMAIN_REGION",
    "LOCAL_IMAGES", "NODE_PARTITION", "APPLICATION_ID", "CONTAINER_IMAGE", "CONTAINER_PORTS", "DOMAIN_K8S",
    "DOMAIN_YUNIKORN", "GROUP_META", "GROUP_LABEL", "GROUP_ANNOTATION", "KEY_POD_NAME", "KEY_NAMESPACE",
    "KEY_REQUIRED_NODE", "KEY_ALLOW_PREEMPTION", "KEY_TASK_GROUPS", "CREATION_TIME", "TAG_REQUIRED_NODE",
    "TAG_ALLOW_PREEMPTION", "TAG_NAMESPACE", "TAG_APP_CREATION_TIME", "TAG_POD_NAME", "TAG_APP_TASK_GROUPS",
    "APP_TAG_NAMESPACE", "MEMORY", "CPU", "APP_TAG_NAMESPACE_RESOURCE_QUOTA",
    "APP_TAG_NAMESPACE_RESOURCE_GUARANTEED", "APP_TAG_NAMESPACE_RESOURCE_MAX_APPS", "APP_TAG_STATE_AWARE_DISABLE", "APP_TAG_CREATE_FORCE",
    "NODE_READY_ATTRIBUTE", "DEFAULT_PARTITION", "KEY_SCHEDULING_POLICY_PARAMETERS",
    "TAG_SCHEDULING_POLICY_PARAMETERS", "TAG_NODE_SELECTOR_PREFIX", "K8S_HOST_NAME", "K8S_RACK_NAME", "NODE_LABELS",
    "TAG_FOREIGN", "NODE_TAINTS", "TAG_TOLERATIONS", "TAG_NODE_AFFINITY", "TAG_HOST_PORTS",
    "TAG_UNSUPPORTED_CONSTRAINTS", "TAG_POD_LABELS", "TAG_POD_AFFINITY", "TAG_TOPOLOGY_SPREAD",
    "TAG_NODE_REQUIREMENTS", "TAG_GANG_TOPOLOGY",
]

# Node attributes
ARCH = "si/arch"
HOST_NAME = "si/hostname"
RACK_NAME = "si/rackname"
OS = "si/os"
INSTANCE_TYPE = "si/instance-type"
FAILURE_DOMAIN_ZONE = "si/zone"
FAILURE_DOMAIN_REGION = "si/region"
LOCAL_IMAGES = "si/local-images"
NODE_PARTITION = "si/node-partition"

# Allocation attributes
APPLICATION_ID = "si/application-id"
CONTAINER_IMAGE = "si/container-image"
CONTAINER_PORTS = "si/container-ports"

# Allocation tag domains, groups and keys
DOMAIN_K8S = "kubernetes.io/"
DOMAIN_YUNIKORN = "yunikorn.apache.org/"
GROUP_META = "meta/"
GROUP_LABEL = "label/"
GROUP_ANNOTATION = "annotation/"
KEY_POD_NAME = "podName"
KEY_NAMESPACE = "namespace"
KEY_REQUIRED_NODE = "requiredNode"
KEY_ALLOW_PREEMPTION = "allowPreemption"
KEY_SCHEDULING_POLICY_PARAMETERS = "schedulingPolicyParameters"
CREATION_TIME = "creationTime"  # allocation tag (recovery): unix seconds
TAG_FOREIGN = "foreign"  # allocation tag (SI >= 1.6): a pod of another scheduler, value static|default

# Composed tag names the core reads
TAG_REQUIRED_NODE = DOMAIN_YUNIKORN + KEY_REQUIRED_NODE  # yunikorn.apache.org/requiredNode
TAG_ALLOW_PREEMPTION = DOMAIN_YUNIKORN + KEY_ALLOW_PREEMPTION
TAG_NAMESPACE = DOMAIN_K8S + GROUP_META + KEY_NAMESPACE  # kubernetes.io/meta/namespace
TAG_APP_CREATION_TIME = DOMAIN_YUNIKORN + CREATION_TIME  # app tag: unix seconds
# app tag: the k8s shim's gang annotation ("placeholderTimeoutInSeconds=60 gangSchedulingStyle=Hard")
TAG_SCHEDULING_POLICY_PARAMETERS = DOMAIN_YUNIKORN + KEY_SCHEDULING_POLICY_PARAMETERS
# Korral convention (not YuniKorn): an ask tag "korral.io/node-selector/<attr>" = "<value>"
# only matches nodes whose attribute <attr> (or node label <attr> in NODE_LABELS) equals
# <value>. Several such tags must all match.
TAG_NODE_SELECTOR_PREFIX = "korral.io/node-selector/"

# Kubernetes' node filters, evaluated in the core as node checks (the SI has no callback for
# kube-scheduler's filter plugins, so Korral's k8s shim sends what they read). Values are JSON in
# Kubernetes' own field names and spelling, exactly as in the pod or node object.
NODE_TAINTS = "korral.io/taints"  # node attribute: the node's spec.taints (list of {key, value, effect})
TAG_TOLERATIONS = "korral.io/tolerations"  # ask tag: the pod's spec.tolerations
# ask tag: the pod's spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
# (a NodeSelector: {"nodeSelectorTerms": [{matchExpressions, matchFields}, ...]})
TAG_NODE_AFFINITY = "korral.io/node-affinity"
# ask tag, and the same tag on an allocation (placed or foreign) so a node knows its used ports:
# the host ports of the pod's containers (list of {hostIP, hostPort, protocol}; protocol TCP
# when absent, hostIP 0.0.0.0 when absent)
TAG_HOST_PORTS = "korral.io/host-ports"
# Inter-pod constraints (kube-scheduler's InterPodAffinity and PodTopologySpread filters). The
# core counts pods per topology domain from what every allocation carries (placed, foreign,
# placeholder): its namespace (TAG_NAMESPACE), its labels (TAG_POD_LABELS) and its own required
# anti-affinity (TAG_POD_AFFINITY, for the symmetric rule). Label selectors are Kubernetes'
# LabelSelector ({matchLabels, matchExpressions}); matchLabelKeys / mismatchLabelKeys arrive
# already merged into the selector (the API server stores them so), and namespaceSelector is
# resolved by the RM into ``namespaces``.
# ask and allocation tag: the pod's labels as a JSON object
TAG_POD_LABELS = "korral.io/pod-labels"
# ask and allocation tag: the pod's inter-pod affinity, JSON
#   {"required": [TERM...], "requiredAnti": [TERM...],
#    "preferred": [{"weight": W, "term": TERM}...], "preferredAnti": [...]}
# TERM = {"selector": LabelSelector | null (matches nothing), "topologyKey": KEY,
#         "namespaces": [NS...] | null (null: every namespace)}; absent keys are empty lists
TAG_POD_AFFINITY = "korral.io/pod-affinity"
# ask tag: the pod's spec.topologySpreadConstraints, JSON list, Kubernetes' field names
#   [{"maxSkew", "topologyKey", "whenUnsatisfiable", "selector" (labelSelector, merged),
#     "minDomains"?, "nodeAffinityPolicy"?, "nodeTaintsPolicy"?}]; counted in the pod's namespace
TAG_TOPOLOGY_SPREAD = "korral.io/topology-spread"
# ask tag: further required node selectors, all of which a node must match, each with the reason
# a node that does not match is rejected for (volumes' node affinity and zones, the nodes where a
# claim's devices or a WaitForFirstConsumer volume can be had, nodes excluded for a while), JSON
#   [{"reason": "node(s) had volume node affinity conflict", "nodeSelector": {"nodeSelectorTerms": [...]},
#     "retry": false}]   (retry: whether waiting can help)
TAG_NODE_REQUIREMENTS = "korral.io/node-requirements"
# ask tag: what keeps an ask from any node that the RM alone knows (the k8s shim: a volume or
# resource claim that does not exist yet, a device class missing, a CEL selector failing),
# comma-separated human names; every node rejects such an ask, naming them
TAG_UNSUPPORTED_CONSTRAINTS = "korral.io/unsupported-constraints"
# app tag (an ask tag is read too, for RMs that tag asks only): where a gang's members must or
# should land together, JSON {"level": LEVEL, "mode": "required" | "preferred"}. LEVEL names one of
# the partition's topology levels (queues.yaml ``topology``), by its name or by the node label it
# is read from (a Kubernetes PodGroup names the label key). required: every member in one domain
# of that level, or the gang waits; preferred: the tightest domain that fits, level by level.
TAG_GANG_TOPOLOGY = "korral.io/gang-topology"

# Node attributes the k8s shim sends (si.io/ rather than si/)
K8S_HOST_NAME = "si.io/hostname"
K8S_RACK_NAME = "si.io/rackname"
NODE_LABELS = "si.io/nodelabels"  # the node's k8s labels as a JSON object

# Core and shim
MEMORY = "memory"
CPU = "vcore"
APP_TAG_NAMESPACE_RESOURCE_QUOTA = "namespace.resourcequota"
APP_TAG_NAMESPACE_RESOURCE_GUARANTEED = "namespace.resourceguaranteed"  # app tag, as the quota (SI 1.4)
APP_TAG_NAMESPACE_RESOURCE_MAX_APPS = "namespace.resourcemaxapps"  # app tag: an integer (SI 1.4)
APP_TAG_STATE_AWARE_DISABLE = "application.stateaware.disable"
APP_TAG_CREATE_FORCE = "application.create.force"  # the RM recovers an app it runs (YuniKorn 1.4)
# allocation tag (SI 1.7): an allocation the RM placed itself, counted as the node's occupied
# resource (value "static": not preemptable; "default": preemptable)
TAG_FOREIGN = "foreign"
NODE_READY_ATTRIBUTE = "ready"

DEFAULT_PARTITION = "default"

# Tags the k8s shim sends (the client, the simulator and the test RM send them too)
KEY_TASK_GROUPS = "task-groups"
TAG_POD_NAME = DOMAIN_K8S + GROUP_META + KEY_POD_NAME  # kubernetes.io/meta/podName
TAG_APP_TASK_GROUPS = DOMAIN_YUNIKORN + KEY_TASK_GROUPS  # app tag: the gang's task groups (JSON)
APP_TAG_NAMESPACE = "namespace"  # app tag: the application's namespace
