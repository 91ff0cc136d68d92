"""The Kubernetes shim: ``korral k8s-shim`` binds the pods that name YuniKorn as their scheduler.

An RM on ``si_client`` (SI v1.8) that honours yunikorn-k8shim's pod contract. One pod's path:
``watch`` (informers) -> ``translate`` (what the pod means to the scheduler) -> ``shim`` (its
books, ``translate.model``; the partition of each message, ``pools``) -> ``outbox`` -> the scheduler ->
``shim`` -> ``writes`` (binding, events, conditions, placeholders). ``kube`` is the API client
everything uses; ``fake`` is the API double (``korral k8s-fake``), which never imports the shim.
``main`` is the command, ``config`` / ``reloader`` YuniKorn's configmaps and their hot reload,
``demo`` ``make demo-k8s``.
See docs/kubernetes.md.
"""
