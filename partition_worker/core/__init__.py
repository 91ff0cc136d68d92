"""The pure scheduling core of one partition.

Commands in (``commands``), outcomes out (``outcomes``), time passed in as int
nanoseconds. No I/O, no clock, no randomness, no logging: UUIDs come from the injected
``new_uuid``, the creation time from ``created_ns``, the OS group lookup from
``CoreSettings.group_lookup``. The SI adapter is ``partition_worker.session``; the module
map is in README.md.
"""

from .app_state import AppEvent, AppState, IllegalTransition
from .commands import (AddApp, AddAsk, AddNode, DrainNode, RecoveredAlloc, ReleaseAlloc,
                       ReleaseAsk, RemoveApp, RemoveNode, UndrainNode, UpdateNode)
from .node import NodeSortPolicy
from .outcomes import EventType, Outcomes, SchedState, Termination
from .partition import Partition
from .queue import AppSortPolicy, ObjectState, Queue, QueueTree
from .settings import CoreSettings

__all__ = [
    "AddApp", "AddAsk", "AddNode", "AppEvent", "AppSortPolicy", "AppState", "CoreSettings",
    "DrainNode", "EventType", "IllegalTransition", "NodeSortPolicy", "ObjectState", "Outcomes",
    "Partition", "Queue", "QueueTree", "RecoveredAlloc", "ReleaseAlloc", "ReleaseAsk",
    "RemoveApp", "RemoveNode", "SchedState", "Termination", "UndrainNode", "UpdateNode",
]
