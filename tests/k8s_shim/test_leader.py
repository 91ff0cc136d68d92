"""Leader election (``k8s_shim.leader``) over the API double ``korral k8s-fake`` started in the test,
with a fake clock: acquire, renew, takeover once the lease expired by the observer's own clock,
give-up at the renew deadline, a 409 lost race, release on a clean stop, the write fence; and the
double's Lease as a real server has it (409 on a stale resourceVersion, typed fields, validation)."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from k8s_shim import leader
from k8s_shim.fake.cluster import ClusterOptions, FakeCluster
from k8s_shim.kube.kubeclient import ApiError, KubeClient
from k8s_shim.kube.kubeconfig import KubeConfig
from k8s_shim.leader import FencedClient, LeaderElector, LeaseSettings, NotLeading
from tests.conftest import run_korral

pytestmark = pytest.mark.timeout(60)

NS = "kube-system"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
LEASE = f"{LEASES}/yunikorn"


class Clock:
    """Monotonic and wall time that move only when the test says; ``sleep`` moves them."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.wall_now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall_now += seconds

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)


def settings(identity: str, **kw) -> LeaseSettings:
    return LeaseSettings("yunikorn", NS, identity, **kw)


def elector(client: KubeClient, identity: str, clock: Clock, **kw) -> LeaderElector:
    return LeaderElector(client, settings(identity, **kw), clock=clock, wall=clock.wall, sleep=clock.sleep,
                         jitter=lambda: 0.0)


def run(scenario):
    """Run ``scenario(client)`` against a fresh API double."""
    async def main():
        cluster = FakeCluster(ClusterOptions(token="t", kubelet=False))
        url = await cluster.start()
        try:
            async with KubeClient(KubeConfig(server=url, token="t")) as client:
                await scenario(client)
        finally:
            await cluster.stop()
    asyncio.run(main())


def test_the_first_candidate_creates_the_lease_and_holds_it():
    async def scenario(client):
        clock = Clock()
        a = elector(client, "a", clock)
        assert await a.try_acquire_or_renew()
        spec = (await client.get(LEASE))["spec"]
        assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15
        assert spec["leaseTransitions"] == 0 and spec["acquireTime"] == spec["renewTime"]
        assert spec["renewTime"].endswith(".000000Z")
        assert a.holds()
    run(scenario)


def test_renewing_keeps_the_acquire_time_and_moves_the_renew_time():
    async def scenario(client):
        clock = Clock()
        a = elector(client, "a", clock)
        assert await a.try_acquire_or_renew()
        first = (await client.get(LEASE))["spec"]
        clock.advance(2)
        assert await a.try_acquire_or_renew()
        spec = (await client.get(LEASE))["spec"]
        assert spec["acquireTime"] == first["acquireTime"] and spec["renewTime"] > first["renewTime"]
        assert spec["leaseTransitions"] == 0
    run(scenario)


def test_a_standby_takes_over_only_a_lease_duration_after_it_last_saw_the_record_change():
    async def scenario(client):
        clock = Clock()
        a, b = elector(client, "a", clock), elector(client, "b", clock)
        assert await a.try_acquire_or_renew()
        for _ in range(5):  # a renews: b, looking each time, sees the record change
            assert not await b.try_acquire_or_renew()
            clock.advance(2)
            assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()  # b saw a's last renewal now
        clock.advance(14.9)
        assert not await b.try_acquire_or_renew()
        clock.advance(0.1)
        assert await b.try_acquire_or_renew()
        spec = (await client.get(LEASE))["spec"]
        assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
        assert spec["acquireTime"] == spec["renewTime"]
        assert b.holds() and not a.holds()  # a renewed 15 s ago: past its renew deadline
    run(scenario)


def test_expiry_is_judged_by_the_observers_clock_not_by_the_holders_timestamps():
    async def scenario(client):
        clock = Clock()
        old = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "yunikorn"},
               "spec": {"holderIdentity": "gone", "leaseDurationSeconds": 15,
                        "renewTime": "2001-01-01T00:00:00.000000Z", "acquireTime": "2001-01-01T00:00:00.000000Z"}}
        await client.request("POST", LEASES, body=old)
        b = elector(client, "b", clock)
        assert not await b.try_acquire_or_renew()  # renewed "long ago", but b only now saw it
        clock.advance(15)
        assert await b.try_acquire_or_renew()
    run(scenario)


def test_a_restarted_process_of_the_same_instance_takes_its_lease_back_at_once():
    async def scenario(client):
        clock = Clock()
        first = elector(client, "pod-a_1", clock, instance="pod-a")
        assert await first.try_acquire_or_renew()
        again = elector(client, "pod-a_2", clock, instance="pod-a")  # the container restarted
        other = elector(client, "pod-ab_3", clock, instance="pod-ab")  # another pod: waits
        assert not await other.try_acquire_or_renew()
        assert await again.try_acquire_or_renew()
        spec = (await client.get(LEASE))["spec"]
        assert spec["holderIdentity"] == "pod-a_2" and spec["leaseTransitions"] == 1
        assert not await other.try_acquire_or_renew()
    run(scenario)


def test_the_leader_gives_up_when_it_cannot_renew_within_the_renew_deadline():
    async def scenario(client):
        clock = Clock()
        a = elector(client, "a", clock)
        assert await a.try_acquire_or_renew()
        lost: list[str] = []
        tries = 0
        real = a.try_acquire_or_renew

        async def failing() -> bool:  # the API server does not answer
            nonlocal tries
            tries += 1
            return False
        a.try_acquire_or_renew = failing
        await asyncio.wait_for(a.keep(lost.append), 5)
        assert lost and "renew deadline (10s)" in lost[0]
        assert tries == 4  # at 2, 4, 6, 8 s; at 10 s the deadline has passed
        assert not a.holds()
        a.try_acquire_or_renew = real
    run(scenario)


def test_the_leader_keeps_renewing_while_the_server_answers():
    async def scenario(client):
        clock = Clock()
        a = elector(client, "a", clock)
        assert await a.try_acquire_or_renew()
        lost: list[str] = []
        keeping = asyncio.ensure_future(a.keep(lost.append))
        for _ in range(50):
            await asyncio.sleep(0.01)
        assert clock.now > 1000 + 30 and a.holds() and not lost  # many renewals, every one in time
        keeping.cancel()
    run(scenario)


def test_a_leader_whose_lease_was_taken_gives_up_at_its_next_renewal():
    async def scenario(client):
        clock = Clock()
        a, b = elector(client, "a", clock), elector(client, "b", clock)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        clock.advance(15)  # a froze; b takes over
        assert await b.try_acquire_or_renew()
        lost: list[str] = []
        a.renewed_at = clock.now - 1  # as if a's clock had not seen the freeze
        await asyncio.wait_for(a.keep(lost.append), 5)
        assert lost == ["lease kube-system/yunikorn: taken over by b"]
    run(scenario)


class Racing(KubeClient):
    """A client whose first PUT lets another candidate write first (the race a 409 settles)."""

    other: LeaderElector | None = None

    async def request(self, method, path, **kw):
        if method == "PUT" and self.other is not None:
            other, self.other = self.other, None
            assert await other.try_acquire_or_renew()
        return await super().request(method, path, **kw)


def test_of_two_candidates_racing_for_a_free_lease_one_wins_and_the_other_gets_a_409():
    async def scenario(client):
        clock = Clock()
        a = elector(client, "a", clock)
        assert await a.try_acquire_or_renew()
        assert await a.release()
        racing = Racing(client.config)
        await racing.start()
        try:
            b, c = elector(racing, "b", clock), elector(client, "c", clock)
            racing.other = c
            assert not await b.try_acquire_or_renew()  # c wrote between b's read and b's write
            assert not b.holds() and c.holds()
            assert (await client.get(LEASE))["spec"]["holderIdentity"] == "c"
            assert not await b.try_acquire_or_renew()  # and c's lease is fresh
        finally:
            await racing.close()
    run(scenario)


def test_release_clears_the_holder_so_a_standby_takes_over_at_once():
    async def scenario(client):
        clock = Clock()
        a, b = elector(client, "a", clock), elector(client, "b", clock)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        assert await a.release()
        spec = (await client.get(LEASE))["spec"]
        assert "holderIdentity" not in spec and spec["leaseDurationSeconds"] == 1
        assert not a.holds()
        assert await b.try_acquire_or_renew()  # no clock moved
        assert (await client.get(LEASE))["spec"]["leaseTransitions"] == 1
        assert not await a.release()  # not held: nothing written
    run(scenario)


def test_the_fence_lets_a_standby_write_nothing_and_stops_a_leader_that_lost_the_lease():
    async def scenario(client):
        clock = Clock()
        a = elector(client, "a", clock)
        lost: list[str] = []
        fenced = FencedClient(client, a.holds, lambda: a.led, lost.append)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "i"}]}}
        with pytest.raises(NotLeading):  # a standby: refused, not sent
            await fenced.create_pod("default", pod)
        assert not lost and fenced.withheld == 1
        await fenced.get("/api/v1/namespaces/default/pods")  # reads pass
        assert await a.try_acquire_or_renew()
        await fenced.create_pod("default", pod)  # the leader writes
        clock.advance(10)  # frozen past the renew deadline: no renewal ran
        answers: list = []
        fenced.submit_bind("default", "p", "uid", "node-1", answers.append)
        with pytest.raises(NotLeading):
            await fenced.create_pod("default", dict(pod, metadata={"name": "q"}))
        assert lost and "no longer holds the lease" in lost[0]
        assert answers == []  # no binding sent, none answered
        with pytest.raises(ApiError) as missing:
            await client.get("/api/v1/namespaces/default/pods/q")
        assert missing.value.status == 404
        assert not (await client.get("/api/v1/namespaces/default/pods/p"))["spec"].get("nodeName")
    run(scenario)


def test_a_standby_holds_its_events_and_the_new_leader_posts_those_since_the_old_one_was_last_seen():
    async def scenario(client):
        clock = Clock()
        a, b = elector(client, "a", clock), elector(client, "b", clock)
        held = leader.StandbyEvents(clock, keep=30)
        assert await a.try_acquire_or_renew()
        held.post("long ago")
        clock.advance(40)
        held.post("while a led")  # a posted it too
        clock.advance(1)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()  # b sees a's last renewal now
        seen = clock.now
        clock.advance(1)
        held.post("after a was last seen", reason="x")
        clock.advance(14)
        assert await b.try_acquire_or_renew()
        assert b.previous_seen_at == seen
        posted = []

        class Into:
            def post(self, *args, **kwargs):
                posted.append((args, kwargs))
        assert held.replay(Into(), b.previous_seen_at) == 1
        assert posted == [(("after a was last seen",), {"reason": "x"})] and not held.held
    run(scenario)


def test_a_leader_that_made_the_lease_had_no_predecessor():
    async def scenario(client):
        a = elector(client, "a", Clock())
        assert await a.try_acquire_or_renew()
        assert a.previous_seen_at == float("-inf")
    run(scenario)


def test_the_standby_holds_only_the_last_seconds_and_at_most_its_cap():
    clock = Clock()
    held = leader.StandbyEvents(clock, keep=10, cap=3)
    for i in range(5):
        held.post(i)
    assert [args for _, args, _ in held.held] == [(2,), (3,), (4,)]
    clock.advance(11)
    held.post(9)
    assert [args for _, args, _ in held.held] == [(9,)]


def test_the_scheduler_client_is_fenced_too():
    class Api:
        def __init__(self):
            self.sent = []
            self.state = "RUNNING"

        def update_allocation(self, request):
            self.sent.append(request)

    allowed = [True]
    api = Api()
    si = leader.FencedSI(api, lambda what: allowed[0])
    si.update_allocation("ask")
    allowed[0] = False
    si.update_allocation("late")
    assert api.sent == ["ask"] and si.state == "RUNNING"


class Recording(KubeClient):
    verbs: set

    async def request(self, method, path, **kw):
        self.verbs.add({"GET": "get", "POST": "create", "PUT": "update"}.get(method, method))
        return await super().request(method, path, **kw)


def test_the_election_asks_only_what_its_rbac_table_grants():
    async def scenario(client):
        clock = Clock()
        recording = Recording(client.config)
        recording.verbs = set()
        await recording.start()
        try:
            a, b = elector(recording, "a", clock), elector(recording, "b", clock)
            assert await a.try_acquire_or_renew() and await a.try_acquire_or_renew()
            assert not await b.try_acquire_or_renew()
            assert await a.release()
        finally:
            await recording.close()
        assert {("coordination.k8s.io", "leases", v) for v in recording.verbs} == leader.RBAC
    run(scenario)


# ---------------------------------------------------------------------- the double's Lease

def _lease(**spec) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": spec}


def test_the_doubles_lease_refuses_a_write_with_a_stale_resource_version_or_none():
    async def scenario(client):
        made = await client.request("POST", LEASES, body=_lease(holderIdentity="a"))
        rv = made["metadata"]["resourceVersion"]
        await client.request("PUT", f"{LEASES}/l", body={**_lease(holderIdentity="b"),
                                                         "metadata": {"name": "l", "resourceVersion": rv}})
        with pytest.raises(ApiError) as stale:
            await client.request("PUT", f"{LEASES}/l", body={**_lease(holderIdentity="c"),
                                                             "metadata": {"name": "l", "resourceVersion": rv}})
        assert stale.value.status == 409 and stale.value.reason == "Conflict"
        assert 'Operation cannot be fulfilled on leases.coordination.k8s.io "l": the object has been modified' \
            in stale.value.message
        with pytest.raises(ApiError) as blind:  # a Lease is never updated without naming the version read
            await client.request("PUT", f"{LEASES}/l", body=_lease(holderIdentity="d"))
        assert blind.value.status == 422 and blind.value.message == (
            'leases.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
            "must be specified for an update")
        with pytest.raises(ApiError) as twice:
            await client.request("POST", LEASES, body=_lease())
        assert twice.value.status == 409 and twice.value.reason == "AlreadyExists"
    run(scenario)


@pytest.mark.parametrize("spec, status, words", [
    ({"leaseDurationSeconds": 0}, 422, "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"),
    ({"leaseTransitions": -1}, 422, "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"),
    ({"preferredHolder": "x"}, 422, "spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"),
    ({"strategy": "Newest"}, 422, 'spec.strategy: Unsupported value: "Newest"'),
    ({"leaseDurationSeconds": "15"}, 400, "cannot unmarshal string into Go struct field "
                                          "LeaseSpec.spec.leaseDurationSeconds of type int32"),
    ({"renewTime": "yesterday"}, 400, 'parsing time "yesterday"'),
    ({"renewTime": "2026-01-01T00:00:00Z"}, 400, "2006-01-02T15:04:05.000000Z07:00"),
], ids=["duration-zero", "transitions-negative", "preferred-holder-without-strategy", "unknown-strategy",
        "duration-a-string", "time-not-a-time", "time-without-microseconds"])
def test_the_doubles_lease_is_validated_as_a_real_servers(spec, status, words):
    async def scenario(client):
        with pytest.raises(ApiError) as bad:
            await client.request("POST", LEASES, body=_lease(**spec))
        assert bad.value.status == status and words in bad.value.message, bad.value.message
    run(scenario)


def test_the_doubles_lease_times_are_stored_in_utc_with_microseconds():
    async def scenario(client):
        made = await client.request("POST", LEASES, body=_lease(renewTime="2026-01-01T01:00:00.500000+01:00"))
        assert made["spec"]["renewTime"] == "2026-01-01T00:00:00.500000Z"
    run(scenario)


# ---------------------------------------------------------------------- flags

def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scheduler-name", default="yunikorn")
    leader.add_flags(parser)
    return parser.parse_args(list(argv))


def test_the_flags_default_to_kube_schedulers_and_name_the_lease_after_the_scheduler():
    args = _parse()
    s = leader.settings_from(args, "yunikorn-ns", "host", "x1")
    assert args.leader_elect is True
    assert (s.name, s.namespace, s.identity) == ("yunikorn", "yunikorn-ns", "host_x1")
    assert (s.lease_duration, s.renew_deadline, s.retry_period) == (15.0, 10.0, 2.0)
    args = _parse("--leader-elect=false", "--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline",
                  "3000ms", "--leader-elect-retry-period", "0.5", "--leader-elect-resource-name", "korral",
                  "--leader-elect-resource-namespace", "ops")
    s = leader.settings_from(args, "yunikorn-ns", "host", "x1")
    assert args.leader_elect is False
    assert (s.name, s.namespace, s.lease_duration, s.renew_deadline, s.retry_period) == ("korral", "ops", 4, 3, 0.5)


@pytest.mark.parametrize("argv, words", [
    (("--leader-elect-lease-duration", "10s"), "must be greater than --leader-elect-renew-deadline"),
    (("--leader-elect-retry-period", "9s"), "must be greater than 1.2 x --leader-elect-retry-period"),
], ids=["lease-not-longer-than-deadline", "deadline-not-longer-than-retries"])
def test_inconsistent_timings_are_refused_naming_the_flags(argv, words):
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        leader.settings_from(_parse(*argv), "ns", "host", "x")


def test_a_bad_duration_is_named():
    with pytest.raises(SystemExit):
        _parse("--leader-elect-retry-period", "soon")


def test_the_shim_refuses_inconsistent_timings_at_start(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                          "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
                          "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {}}]\n")
    out = run_korral("k8s-shim", "--kubeconfig", str(kubeconfig), "--leader-elect-lease-duration", "5s", timeout=30)
    assert out.returncode == 2, out.stderr
    assert "--leader-elect-lease-duration (5s) must be greater than --leader-elect-renew-deadline (10s)" in out.stderr
