"""``korral k8s-shim``: schedule a Kubernetes cluster's YuniKorn pods with Korral.

Start-up, in YuniKorn's shim's order: read the configmaps (``yunikorn-defaults``,
``yunikorn-configs``) of the shim's namespace; list and watch namespaces, priority classes, nodes,
volume claims, persistent volumes, storage classes, CSI nodes, DRA's device classes, resource slices
and resource claims (first, where resource.k8s.io/v1 is served), our pods (``spec.schedulerName`` =
``--scheduler-name``) and the
pods of other schedulers that run on nodes; once every list is in, register with Korral (SI v1.8,
rmID ``service.clusterId``) and replay the cluster: applications, nodes drained, the pods already
running as placed allocations, the others as asks; nodes open once their pods are counted.
Then follow the cluster until SIGTERM or SIGINT.

With leader election (``--leader-elect``, the default; ``k8s_shim.leader``) the replica tries for
the Lease once before it lists anything; one that does not get it lists and watches all the same
but registers with nobody and writes nothing until it takes the Lease over, then registers and
replays. A leader that loses the Lease exits at once with status 1; a clean stop releases it. SIGUSR1 logs
the shim's counters in one line (events posted, dropped (by reason), refused, folded, in series;
API requests; 429s, retries and waits for the rate limit), as it does when it stops.

A configmap that cannot be read, or a config Korral refuses at registration, is reported (log and
a ``ConfigRejected`` event) and the shim waits for the configmaps to change, scheduling nothing
meanwhile. Exit status: 0 after a signal, 1 when Korral refuses a re-registration later (the
client failed) or the Lease was lost, 2 for a start-up error (no Kubernetes connection, bad flags).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import uuid

import grpc

from common import addresses, security, si_v18_pb2 as si
from common.gcpause import steady_until_stopped
from si_client import Backoff, ClientState, SchedulerAPI, SchedulerError, channel_options
from k8s_shim import leader
from k8s_shim.kube import kubeconfig
from k8s_shim.writes.conditions import Explainer
from k8s_shim.config import ConfigMapError
from k8s_shim.writes.events import EventRecorder
from k8s_shim.watch.informer import Informer, name_key
from k8s_shim.kube.kubeclient import KubeClient
from k8s_shim.translate.namespaces import read_namespace, read_priority_class
from k8s_shim.translate.nodes import read_node
from k8s_shim.translate.pods import TERMINATED, PodRules, decoder, lite_watch
from k8s_shim.pools import config_partitions
from k8s_shim.reloader import Reloader
from k8s_shim.writes.placeholders import PlaceholderSettings
from k8s_shim.shim import Shim, ShimSettings
from k8s_shim.translate.volumes import read_claim, read_csinode, read_storage_class, read_volume
from k8s_shim.translate import devices, podgroups
from k8s_shim.kube.kubeclient import ApiError

__all__ = ["configure", "run", "watched"]

log = logging.getLogger("k8s_shim")
VERSION = "korral-k8s-shim/0.1"


def configure(parser: argparse.ArgumentParser) -> None:
    addresses.add_flag(parser, "--si-address", "si_address", "rmproxy gRPC address (host:port)")
    parser.add_argument("--rest-address", default=os.environ.get("KORRAL_REST_ADDRESS", ""),
                        help="rmproxy REST address: a waiting pod's PodScheduled message then says why, node by "
                             "node stage, as `korral explain` does (default: the scheduler's short reason) "
                             "[$KORRAL_REST_ADDRESS]")
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: the pod's service account in a cluster, else $KUBECONFIG, "
                             "else ~/.kube/config)")
    parser.add_argument("--kube-context", default=None, help="kubeconfig context (default: its current-context)")
    parser.add_argument("--namespace", default=os.environ.get("NAMESPACE", ""),
                        help="namespace of the configmaps yunikorn-defaults and yunikorn-configs "
                             "[$NAMESPACE, else the service account's or the context's namespace]")
    parser.add_argument("--scheduler-name", default="yunikorn",
                        help="pods with this spec.schedulerName are scheduled by Korral; every other pod on a node "
                             "is a foreign allocation (default: yunikorn)")
    parser.add_argument("--best-effort-constraints", action="store_true",
                        help="deprecated, no effect: every constraint of a pod is evaluated now (it placed pods "
                             "with inter-pod constraints, spread, volumes or DRA claims as if they had none); "
                             "accepted so that existing manifests keep working")
    parser.add_argument("--event-settle-seconds", type=_seconds, default=1.0, metavar="S",
                        help="a pod's routine events wait this long and are folded when a later one says more: a pod "
                             "placed and bound within S gets one event, Scheduled (default 1; 0 posts every event as "
                             "YuniKorn's shim does)")
    parser.add_argument("--partition-label", default="", metavar="KEY",
                        help="schedule each node pool as its own partition: a node's value of label KEY names its "
                             "partition (no label: default); a pod's partition is its yunikorn.apache.org/partition "
                             "annotation, else its namespace's, else default; queues.yaml lists the partitions "
                             "(default: everything in partition default, as YuniKorn)")
    parser.add_argument("--instance", default=os.environ.get("POD_NAME", ""),
                        help="reportingInstance of the shim's events [$POD_NAME, else the host name]")
    security.add_tls_client_flags(parser, "the shim")
    leader.add_flags(parser)  # leader election: --leader-elect and its settings
    addresses.add_log_level(parser)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError(f"{text!r}: between 0 and 60 seconds")
    return value


def run(args: argparse.Namespace) -> int:
    addresses.setup_logging(args.log_level, "k8s-shim")
    if args.best_effort_constraints:
        log.warning("--best-effort-constraints has no effect any more: every constraint of a pod "
                    "(inter-pod affinity, topology spread, volumes, DRA claims) is evaluated")
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 0


async def _main(args: argparse.Namespace) -> int:
    try:
        conn = kubeconfig.load(args.kubeconfig, args.kube_context)
        credentials = security.grpc_channel_credentials(args.tls_ca, args.tls_client_cert, args.tls_client_key)
    except (kubeconfig.KubeConfigError, security.SecurityError) as exc:
        log.error("k8s-shim: %s", exc)
        return 2
    namespace = args.namespace or conn.namespace
    log.info("k8s-shim: API server %s (%s), namespace %s, scheduler name %s", conn.server, conn.source, namespace,
             args.scheduler_name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    instance = args.instance or socket.gethostname()
    # -- leader election (k8s_shim/leader.py): the Lease's settings; every write through its fence --
    lease = None
    if args.leader_elect:
        try:
            lease = leader.settings_from(args, namespace, instance, uuid.uuid4().hex[:12])
        except ValueError as exc:
            log.error("k8s-shim: %s", exc)
            return 2
    # -- end of leader election --
    async with KubeClient(conn) as client:
        leadership = leader.Leadership(client, lease) if lease is not None else None
        writer = leadership.client if leadership is not None else client
        events = EventRecorder(writer, args.scheduler_name, f"{args.scheduler_name}-{instance}",
                               settle=args.event_settle_seconds)
        loop.add_signal_handler(signal.SIGUSR1, _log_counters, "counters", events, client)
        runner = _Runner(args, writer, events, namespace, credentials, leadership)
        tasks = [asyncio.create_task(events.run(), name="events")]
        try:
            return await runner.run(stop, tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await runner.close()
            _log_counters("stopping", events, client)


def _log_counters(when: str, events: EventRecorder, client: KubeClient) -> None:
    """One line of the shim's counters (on SIGUSR1, and when it stops): the events posted,
    dropped (the API server did not keep up), refused, folded and counted in series; the API
    requests made and the connections opened. Logged as a warning: it is asked for, whatever
    the log level."""
    pool = client.pool
    log.warning("k8s-shim %s: events %s; API requests %d, connections %d; flow %s", when,
                " ".join(f"{name}={count}" for name, count in events.counters().items()),
                pool.requests if pool is not None else 0, pool.connects if pool is not None else 0,
                " ".join(f"{name}={count}" for name, count in client.counters().items()))


class _Runner:
    def __init__(self, args, client: KubeClient, events: EventRecorder, namespace: str, credentials,
                 leadership: leader.Leadership | None = None) -> None:
        self.args, self.client, self.events, self.namespace = args, client, events, namespace
        self.credentials = credentials
        self.leadership = leadership
        self.reloader = Reloader(namespace, events)
        self.shim: Shim | None = None
        self.api: SchedulerAPI | None = None
        self.explainer: Explainer | None = None

    def _informer(self, name: str, decode, on_change, *, query=None, key=name_key, lite=None) -> Informer:
        return Informer(self.client, watched(self.namespace)[name], decode, on_change, query=query, key=key,
                        name=name, lite=lite)

    async def _synced(self, informers: list[Informer], tasks: list[asyncio.Task], stop: asyncio.Event) -> bool:
        for inf in informers:
            tasks.append(asyncio.create_task(inf.run(), name=f"informer {inf.name}"))
        waiting = asyncio.gather(*(inf.synced.wait() for inf in informers))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([waiting, stopped], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not waiting.done():
            waiting.cancel()
            return False
        return True

    async def run(self, stop: asyncio.Event, tasks: list[asyncio.Task]) -> int:
        args = self.args
        configmaps = self._informer("configmaps", self.reloader.decode, self.reloader.changed)
        if not await self._synced([configmaps], tasks, stop):
            return 0
        loaded = await self._usable_config(stop)
        if loaded is None:
            return 0
        conf = loaded.conf
        self.client.set_rate(conf.kube_qps, conf.kube_burst)  # read at start only, as YuniKorn
        rules = PodRules(args.scheduler_name, conf.generate_unique_app_ids, not conf.disable_gang_scheduling)
        self.explainer = Explainer(args.rest_address, conf.cluster_id) if args.rest_address else None
        placeholders = PlaceholderSettings(conf.placeholder_image, conf.placeholder_run_as_user,
                                           conf.placeholder_run_as_group, conf.placeholder_fs_group)
        settings = ShimSettings(args.scheduler_name, placeholders=placeholders,
                                partition_label=args.partition_label, volume_bind_timeout=conf.volume_bind_timeout)
        shim = self.shim = Shim(self.client, settings,
                                conf.cluster_id, self.events, self.explainer)
        # -- leader election: one try before reading the cluster; a standby's books post no events --
        if self.leadership is not None and not await self.leadership.try_now(tasks):
            shim.events = self.leadership.standby_events
        # -- end of leader election --
        pools = shim.pools
        if pools.enabled:
            pools.set_partitions(config_partitions(loaded.queues))
            self.reloader.applied = lambda applied: pools.set_partitions(config_partitions(applied.queues))
            log.info("k8s-shim: node pools by label %s, partitions %s", args.partition_label,
                     ", ".join(sorted(pools.known)))
        informers = [
            self._informer("namespaces", lambda raw, old: read_namespace(raw), shim.namespace_changed),
            self._informer("priorityclasses", lambda raw, old: (raw["metadata"]["name"], read_priority_class(raw)),
                           shim.priority_class_changed),
            self._informer("storageclasses", read_storage_class, shim.storage_class_changed),
            self._informer("persistentvolumes", read_volume, shim.volume_changed),
            self._informer("persistentvolumeclaims", read_claim, shim.claim_changed),
            self._informer("csinodes", read_csinode, shim.csinode_changed),
            self._informer("nodes", lambda raw, old: read_node(raw, conf.instance_type_label),
                           pools.node_changed if pools.enabled else shim.node_changed),
            self._informer("pods", decoder(rules, _keep_ours), pools.pod_changed if pools.enabled else shim.pod_changed,
                           key=_uid,
                           lite=lite_watch(rules, _keep_ours),
                           query={"fieldSelector": f"spec.schedulerName={args.scheduler_name}"}),
            self._informer("foreign pods", decoder(rules, _keep_others), shim.foreign_changed, key=_uid,
                           lite=lite_watch(rules, _keep_others),
                           query={"fieldSelector": f"spec.schedulerName!={args.scheduler_name},spec.nodeName!="}),
        ]
        early = []  # read before the pods, so that what a pod names is known when it is (not told missing)
        if await self._serves("/apis/resource.k8s.io/v1", "DRA claims are not allocated"):
            # DRA; a standby reads it too, and writes none: the shim's claim writes go through the
            # fenced client (leader election)
            early += [self._informer("deviceclasses", devices.read_class, shim.device_class_changed),
                      self._informer("resourceslices", devices.read_slice, shim.resource_slice_changed),
                      self._informer("resourceclaims", devices.read_claim, shim.resource_claim_changed)]
        if await self._serves(f"/apis/{podgroups.GROUP_VERSION}", "pods' spec.schedulingGroup is not read"):
            shim.pg_served = True  # Kubernetes 1.36's gang API (k8s_shim.writes.podgroups)
            early.append(self._informer("podgroups", lambda raw, old: podgroups.read_pod_group(raw),
                                        shim.pod_group_changed))
        if early and not await self._synced(early, tasks, stop):
            return 0
        if not await self._synced(informers, tasks, stop):
            return 0
        log.info("k8s-shim: cluster read: %d nodes, %d pods of ours, %d foreign pods, %d applications",
                 len(shim.nodes), len(shim.tasks), len(shim.foreign), len(shim.apps))
        # -- leader election: a standby keeps its informers and books and waits here --
        if self.leadership is not None:
            if not self.leadership.leading:
                # what the books would tell Korral is dropped: the registration's replay covers it
                if not await self.leadership.lead(stop, tasks, standing_by=shim.out.clear):
                    return 0
                posted = self.leadership.took_over(self.events)
                shim.events = self.events  # the leader posts what its books say
                log.info("k8s-shim: took over; %d events of the standby posted", posted)
            log.info("k8s-shim: leading; registering with Korral")
        # -- end of leader election --
        while not await self._register(loaded, stop):  # Korral refused the config: wait for another
            if not await self._changed(stop):
                return 0
            loaded = await self._usable_config(stop)
            if loaded is None:
                return 0
            if pools.enabled:
                pools.set_partitions(config_partitions(loaded.queues))
        if stop.is_set():
            return 0
        self.reloader.api = self.api
        shim.flush()
        # the leader only (a standby waits above): reservations of pods gone while no shim led
        tasks.append(asyncio.create_task(shim.sweep_reservations(), name="DRA reservations"))
        if self.reloader.changed_event.is_set():
            await self.reloader.reload()  # the configmaps changed while we registered
        # 50,000 pods' books: no full GC pass every few seconds
        if await steady_until_stopped(stop, healthy=lambda: self.api.state is not ClientState.FAILED):
            return 0
        log.error("k8s-shim: the scheduler client failed; exiting so that the shim is restarted")
        return 1

    async def _serves(self, group_version: str, without: str) -> bool:
        """Whether the API server serves ``group_version``: resource.k8s.io/v1 (DRA, GA in Kubernetes
        1.34; without it a pod's resource claims keep it waiting as not found), scheduling.k8s.io/v1alpha2
        (PodGroups, alpha in 1.35-1.36, off unless the server turns it on)."""
        try:
            await self.client.get(group_version)
            return True
        except ApiError as exc:
            if exc.status != 404:
                log.warning("k8s-shim: %s not read (%s): %s", group_version, exc, without)
            return False

    def _channel(self) -> grpc.Channel | None:
        if self.credentials is None:
            return None
        return grpc.secure_channel(self.args.si_address, self.credentials, options=channel_options())

    async def _changed(self, stop: asyncio.Event) -> bool:
        """Wait for the configmaps to change; False when stopped first."""
        changed = asyncio.ensure_future(self.reloader.changed_event.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([changed, stopped], return_when=asyncio.FIRST_COMPLETED)
        changed.cancel()
        stopped.cancel()
        return not stop.is_set()

    async def _usable_config(self, stop: asyncio.Event):
        """The configmaps' configuration, waiting for a change while they cannot be read."""
        while True:
            try:
                return self.reloader.initial()
            except ConfigMapError as exc:
                log.error("k8s-shim: the configmaps cannot be used (%s); waiting for them to change", exc)
            if not await self._changed(stop):
                return None

    async def _register(self, loaded, stop: asyncio.Event) -> bool:
        """Register with Korral, retrying while it cannot be reached; False when Korral refuses the
        configuration (an event and the log say why), True when registered or stopped."""
        conf = loaded.conf
        backoff = Backoff(base=0.2, cap=5.0)
        attempt = 0
        while not stop.is_set():
            api = SchedulerAPI(self.args.si_address, channel=self._channel(), si_revision="v1.8",
                               loop=asyncio.get_running_loop())
            self.api = api
            self.shim.api = api if self.leadership is None else self.leadership.fenced_si(api)
            request = si.RegisterResourceManagerRequest(
                rmID=conf.cluster_id, version=VERSION, policyGroup=conf.policy_group, config=loaded.queues,
                extraConfig=loaded.extra, buildInfo={"buildVersion": VERSION, "isPluginVersion": "false"})
            try:
                await api.register_resource_manager_async(request, self.shim)
                log.info("k8s-shim: registered as RM %s with Korral at %s", conf.cluster_id, self.args.si_address)
                return True
            except SchedulerError as exc:
                if exc.code is grpc.StatusCode.INVALID_ARGUMENT:
                    self.reloader.refused_at_start(exc.details)
                    return False
                delay = backoff.delay(attempt)
                attempt += 1
                log.warning("k8s-shim: cannot register with Korral at %s (%s); retrying in %.1fs",
                            self.args.si_address, exc, delay)
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
        return True

    async def close(self) -> None:
        if self.shim is not None:
            self.shim.prebinder.close()
            await self.shim.binder.close()
        if self.api is not None:
            await self.api.close_async()
        if self.explainer is not None:
            await self.explainer.close()
        if self.leadership is not None:
            await self.leadership.release()  # a standby takes over at once


def watched(namespace: str) -> dict[str, str]:
    """What the shim lists and watches: informer name -> API path (the RBAC of deploy/kubernetes/k8s-shim
    grants list and watch on exactly these)."""
    return {"configmaps": f"/api/v1/namespaces/{namespace}/configmaps", "namespaces": "/api/v1/namespaces",
            "priorityclasses": "/apis/scheduling.k8s.io/v1/priorityclasses",
            "storageclasses": "/apis/storage.k8s.io/v1/storageclasses",
            "persistentvolumeclaims": "/api/v1/persistentvolumeclaims",
            "persistentvolumes": "/api/v1/persistentvolumes", "csinodes": "/apis/storage.k8s.io/v1/csinodes",
            "nodes": "/api/v1/nodes",
            "deviceclasses": "/apis/resource.k8s.io/v1/deviceclasses",
            "resourceslices": "/apis/resource.k8s.io/v1/resourceslices",
            "resourceclaims": "/apis/resource.k8s.io/v1/resourceclaims",
            "podgroups": f"/apis/{podgroups.GROUP_VERSION}/podgroups",
            "pods": "/api/v1/pods", "foreign pods": "/api/v1/pods"}


def _keep_ours(node: str, phase: str, ours: bool) -> bool:
    return ours and phase not in TERMINATED


def _keep_others(node: str, phase: str, ours: bool) -> bool:
    """Another scheduler's pods that occupy a node."""
    return bool(node) and not ours and phase not in TERMINATED


def _uid(raw: dict) -> str:
    return raw["metadata"]["uid"]
