"""The benchmarks that drive a whole stack as resource managers do (``korral bench e2e``, ``churn``,
``recovery``, ``backlog``, ``k8s``): RMs on ``si_client`` and the Kubernetes shim, timed from the
outside. The scheduling core's own benchmarks are ``partition_worker.bench*``.
"""
