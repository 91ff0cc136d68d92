"""The Kubernetes shim: ``korral k8s-shim`` binds the pods that name YuniKorn as their scheduler.

An RM on ``si_client`` (SI v1.8) that honours yunikorn-k8shim's pod contract. Its parts:
``kubeconfig`` / ``kubeclient`` (the API server, raw JSON), ``informer`` (list and watch),
``quantity`` (resource quantities). See docs/kubernetes.md.
"""
