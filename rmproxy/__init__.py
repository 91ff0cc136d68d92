"""rmproxy: the server side's front door. RMs reach it over gRPC (``si.v1.Scheduler``, both SI
revisions on one port) and people over REST (``/ws/v1``); it splits each request per partition and
routes it through the broker to the partition's worker.

``proxy`` wires the parts, each given the others as protocols: ``service`` (the gRPC servicer),
``rm_registry`` (RM sessions, Redis), ``router`` (per-partition routing, ``split``, ``revision``),
``broker_side`` (the broker link), ``config_changes`` (the admin endpoint), ``webapi`` (REST and
the dashboard). The resource managers live beside it, never inside: ``si_client``, ``k8s_shim``,
``simulator``, ``benchmarks``. See docs/architecture.md.
"""
