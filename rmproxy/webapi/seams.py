"""What the REST API uses of the rest of rmproxy, as protocols: its handlers are given these parts
(``build_app`` hands each the ones it reads), never rmproxy's own classes."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from common import registry, si_pb2
from rmproxy.cluster_view import ClusterView
from rmproxy.rms import RMSession
from rmproxy.worker_requests import WorkerRequests

__all__ = ["BrokerState", "Registrations", "HeldRMs", "ConfigChanger", "Identity", "RMProxy"]


class BrokerState(Protocol):
    """The broker side as REST reads it (``BrokerSide``): the link, the ownership view, the
    requests to workers."""

    address: str
    view: ClusterView
    requests: WorkerRequests

    @property
    def connected(self) -> bool: ...

    def cluster(self) -> dict[str, Any]: ...


class Registrations(Protocol):
    """What Redis keeps of the RMs (``registry.AsyncRegistryStore``)."""

    async def load(self, rm_id: str) -> registry.Registration | None: ...

    async def config_history(self, rm_id: str) -> list[registry.ConfigRecord]: ...

    async def ping(self) -> bool: ...


class HeldRMs(Protocol):
    """The RMs this rmproxy holds (``RMRegistry``)."""

    rms: Mapping[str, RMSession]
    state_dumps: dict[str, dict]  # rmID -> the RM's last ProvideStateDump {"requestID", "json"}
    listeners: list[Any]


class ConfigChanger(Protocol):
    """The one path of config changes (``ConfigChanges``)."""

    async def change(self, req: si_pb2.UpdateConfigurationRequest, who: str, action: str = ...,
                     expected_checksum: str | None = ..., note: str = ...,
                     allow_partition_removal: bool = ...) -> Any: ...


class Identity(Protocol):
    """This rmproxy: its name, when it started, the envelopes it dropped (``Proxy``)."""

    name: str
    started_ns: int

    @property
    def dropped(self) -> int: ...


class RMProxy(Identity, Protocol):
    """Everything ``build_app`` hands out (``Proxy``)."""

    store: Registrations
    broker: BrokerState
    registry: HeldRMs
    config_changes: ConfigChanger
