"""Talking to the API server: where it is and how to authenticate (``kubeconfig``), a lean
kept-alive HTTP/1.1 client (``http``) and the few API calls the shim makes on it, raw JSON
(``kubeclient``). Everything else in the shim reaches the API server through ``kubeclient``.
"""
