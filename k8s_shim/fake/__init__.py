"""A fake Kubernetes API server with fake nodes (``korral k8s-fake``): the test bed of the shim and
a cluster a user can try it on. It follows a real v1.24 kube-apiserver's wire behaviour as recorded
in ``shared/k8s-wire`` (tests/k8s_fake replays every recording against it).

- :mod:`.store` one resourceVersion counter, objects kept encoded, bounded history, watch queues;
- :mod:`.api` the operations (create, update, patch, delete, bind, evict, list) with each
  resource's strategy from :mod:`.kinds`, :mod:`.pods`, :mod:`.events` (listed in :mod:`.catalog`);
- :mod:`.server` the HTTP front (routing, auth, media types, lists, watches, Tables) on
  :mod:`.httpd`, a lean HTTP/1.1 server of its own on asyncio;
- :mod:`.kubelet` and :mod:`.gc` the controllers a cluster runs besides the server;
- :mod:`.cluster` all of it in one event loop; :mod:`.main` the ``korral k8s-fake`` command.

It imports ``common`` only, never the shim.
"""

from k8s_shim.fake.cluster import ClusterOptions, FakeCluster, NodeTemplate

__all__ = ["ClusterOptions", "FakeCluster", "NodeTemplate"]
