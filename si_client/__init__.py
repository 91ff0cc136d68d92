"""Python client of the Korral scheduler: seed 000's in-process API over gRPC.

Usage::

    api = SchedulerAPI("127.0.0.1:9090")
    api.register_resource_manager(
        si_pb2.RegisterResourceManagerRequest(rmID="my-rm", policyGroup="queues", config=yaml_text),
        my_callback,               # a ResourceManagerCallback (optionally also RecoverableState)
    )
    api.update_node(si_pb2.NodeRequest(nodes=[...]))   # non-blocking
    ...
    api.close()

See ``docs/client.md`` and the docstring of ``si_client.api``.
"""

from si_client.api import SchedulerAPI, channel_options
from si_client.errors import ClientState, NotConnectedError, SchedulerError
from si_client.backoff import Backoff
from si_client.callback import (
    RecoverableState,
    RecoverySnapshot,
    ResourceManagerCallback,
    StateDumpPlugin,
)

__all__ = [
    "Backoff",
    "ClientState",
    "NotConnectedError",
    "RecoverableState",
    "RecoverySnapshot",
    "ResourceManagerCallback",
    "SchedulerAPI",
    "SchedulerError",
    "StateDumpPlugin",
    "channel_options",
]
