"""An event of the worker's ring as YuniKorn 1.9's REST shows it (``/ws/v1/events/batch`` and
``/ws/v1/events/stream``): the protobuf ``si.EventRecord`` of SI 1.8 in its Go JSON form.

The core names what happened with a reason (``NodeAdded``, ``AppStateRunning``, ...) as the
seed's SI had it; ``CHANGES`` gives each reason today's change type and detail (SI 1.4+
``eventChangeType`` / ``eventChangeDetail``), so a reason the core adds is one row here.
Unknown reasons show ``NONE`` / ``DETAILS_NONE``. Enums are numbers and zero values are left
out, as Go's JSON of the protobuf struct does; ``referenceID`` is the seed's ``groupID`` (the
application of a REQUEST event). Korral adds ``id`` (the event's number in its partition's
ring), ``partition`` and the core's ``reason``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["event_dao", "CHANGES", "CHANGE_TYPE", "CHANGE_DETAIL"]

# si.EventRecord.ChangeType and .ChangeDetail (SI 1.8) used below
CHANGE_TYPE = {"NONE": 0, "SET": 1, "ADD": 2, "REMOVE": 3}
CHANGE_DETAIL = {
    "DETAILS_NONE": 0, "REQUEST_CANCEL": 100, "REQUEST_TIMEOUT": 102, "APP_ALLOC": 200, "APP_REJECT": 202,
    "APP_NEW": 203, "APP_ACCEPTED": 204, "APP_STARTING": 205, "APP_RUNNING": 206, "APP_COMPLETING": 207,
    "APP_COMPLETED": 208, "APP_FAILING": 209, "APP_FAILED": 210, "APP_RESUMING": 211, "APP_EXPIRED": 212,
    "NODE_DECOMISSION": 300, "NODE_SCHEDULABLE": 302, "NODE_RESERVATION": 306, "QUEUE_CONFIG": 400,
    "QUEUE_PREEMPTION": 407,  # SI master (YuniKorn 1.9's core sends it; no SI tag has it yet)
    "ALLOC_PREEMPT": 501,
}
# the core's reason -> (change type, change detail)
CHANGES: dict[str, tuple[str, str]] = {
    "AppAdded": ("ADD", "APP_NEW"),
    "ApplicationRejected": ("SET", "APP_REJECT"),
    "AppStateAccepted": ("SET", "APP_ACCEPTED"),
    "AppStateStarting": ("SET", "APP_STARTING"),  # Korral's seed state (reserved number since SI 1.6)
    "AppStateRunning": ("SET", "APP_RUNNING"),
    "AppStateCompleting": ("SET", "APP_COMPLETING"),
    "AppStateCompleted": ("SET", "APP_COMPLETED"),
    "AppStateFailing": ("SET", "APP_FAILING"),
    "AppStateFailed": ("SET", "APP_FAILED"),
    "AppStateRejected": ("SET", "APP_REJECT"),
    "AppStateResuming": ("SET", "APP_RESUMING"),
    "AppStateExpired": ("SET", "APP_EXPIRED"),
    "NodeAdded": ("ADD", "DETAILS_NONE"),
    "NodeRemoved": ("REMOVE", "NODE_DECOMISSION"),
    "NodeDraining": ("SET", "NODE_SCHEDULABLE"),
    "NodeSchedulable": ("SET", "NODE_SCHEDULABLE"),
    "QueueAdded": ("ADD", "DETAILS_NONE"),
    "QueueDraining": ("SET", "QUEUE_CONFIG"),
    "QueueRemoved": ("REMOVE", "DETAILS_NONE"),
    "QuotaPreemption": ("SET", "QUEUE_PREEMPTION"),  # the quota preemption's results summary
    "ReservationCancelled": ("REMOVE", "NODE_RESERVATION"),  # held by a queue or user limit too long
    "AllocationResized": ("SET", "APP_ALLOC"),  # in-place resize
}


def event_dao(rec: Any, event_id: int, partition: str) -> dict:
    """The JSON of one ring record ``rec`` (an ``si_pb2.EventRecord``) numbered ``event_id``."""
    change, detail = CHANGES.get(rec.reason, ("NONE", "DETAILS_NONE"))
    d: dict = {"type": rec.type, "objectID": rec.objectID}
    if rec.message:
        d["message"] = rec.message
    d["timestampNano"] = rec.timestampNano
    if CHANGE_TYPE[change]:
        d["eventChangeType"] = CHANGE_TYPE[change]
    if CHANGE_DETAIL[detail]:
        d["eventChangeDetail"] = CHANGE_DETAIL[detail]
    if rec.groupID:
        d["referenceID"] = rec.groupID
    d["resource"] = {}
    d.update(id=event_id, partition=partition, reason=rec.reason)
    return d
