"""Kubernetes objects into what the scheduler sees, read once per change: pods (YuniKorn's pod
contract, ``pods``; the gang annotations, ``gang``), nodes, namespaces and priority classes,
volume claims, quantities, and the shim's books with the SI messages that report them (``model``). Pure functions and small stores, no I/O: a new kind the
scheduler must see gets its reader here.
"""
