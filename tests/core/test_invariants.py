"""Random command sequences keep the books consistent (node, app, queue and partition totals)."""

import random

import pytest

from common.resources import ZERO, Resource
from partition_worker.core import (AddApp, AddAsk, AddNode, CoreSettings, DrainNode,
                                   RecoveredAlloc, ReleaseAlloc, ReleaseAsk, RemoveApp,
                                   RemoveNode, UndrainNode, UpdateNode)
from tests.core.harness import SECOND, Harness, partition_config, q


def check_books(h: Harness) -> None:
    p = h.p
    node_sum = ZERO
    for n in p.nodes.nodes.values():
        alloc = ZERO
        for a in n.allocations.values():
            alloc = alloc + a.resource
            assert p.allocations[a.uuid] is a
        assert n.allocated.prune() == alloc.prune(), n.node_id
        assert n.available == n.capacity - n.occupied - n.allocated
        node_sum = node_sum + n.allocated
    assert p.root.allocated.prune() == node_sum.prune()
    app_sum = ZERO
    for app in p.apps.values():
        assert app.allocated.prune() == sum((a.resource for a in app.allocations.values()), ZERO).prune()
        pend = sum((a.resource * a.pending for a in app.asks.values() if a.pending > 0), ZERO)
        assert app.pending.prune() == pend.prune(), app.app_id
        app_sum = app_sum + app.allocated
    assert p.root.allocated.prune() == app_sum.prune()
    for queue in p.queues:
        if queue.is_leaf:
            assert queue.pending.prune() == sum((a.pending for a in queue.apps.values()), ZERO).prune()
        assert not queue.allocated.has_negative() and not queue.pending.has_negative()
    scheduled_in_a = sum((a.resource["memory"] for a in p.allocations.values()
                          if a.queue_path == "root.a" and not a.recovered))
    assert scheduled_in_a <= 400  # root.a's max, recovered allocations aside
    order = p.nodes.order
    assert order == sorted(order)
    assert {k[1] for k in order} | set(p.nodes.full) == set(p.nodes.nodes)
    for (app_id, key), res in p.reservations.items():
        assert p.nodes.get(res.node_id).reservation is res
        assert p.apps[app_id].asks[key].reserved_node == res.node_id
    if p.nodes.nodes:
        total = sum((n.capacity for n in p.nodes.nodes.values()), ZERO)
        assert p.root.max.prune() == total.prune()
    else:
        assert p.root.max is None


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", ["fair", "binpacking"])
def test_random_commands_keep_the_books(seed, policy) -> None:
    rnd = random.Random(seed)
    root = q("root", q("a", max={"memory": 400}), q("b", q("c"), q("d", props={"application.sort.policy": "fair"})),
             q("e", props={"application.sort.policy": "stateaware"}), submitacl="*")
    h = Harness(partition_config(root, policy=policy),
                settings=CoreSettings(reservation_delay_ns=SECOND, max_reservations=4))
    leaves = ["root.a", "root.b.c", "root.b.d", "root.e"]
    nodes, apps, uuid_n = [], [], 0
    for step in range(250):
        op = rnd.random()
        if op < 0.12:
            nid = f"n{step}"
            existing = ()
            if apps and rnd.random() < 0.3:
                uuid_n += 1
                existing = (RecoveredAlloc(f"rec-{uuid_n}", "rk", rnd.choice(apps), Resource({"memory": 5, "vcore": 1})),)
            h.do(AddNode(nid, Resource({"memory": rnd.randint(20, 200), "vcore": rnd.randint(2, 20)}),
                         Resource({"memory": rnd.randint(0, 10)}), {}, existing))
            nodes.append(nid)
        elif op < 0.2:
            aid = f"app{step}"
            h.do(AddApp(aid, rnd.choice(leaves), "u"))
            apps.append(aid)
        elif op < 0.5 and apps:
            h.do(AddAsk(f"k{rnd.randint(0, 30)}", rnd.choice(apps),
                        Resource({"memory": rnd.randint(1, 60), "vcore": rnd.randint(0, 4)}),
                        max_allocations=rnd.randint(1, 4), priority=rnd.randint(0, 3)))
        elif op < 0.6 and h.p.allocations:
            a = rnd.choice(list(h.p.allocations.values()))
            h.do(ReleaseAlloc(a.app_id, a.uuid))
        elif op < 0.65 and apps:
            h.do(ReleaseAsk(rnd.choice(apps), rnd.choice(["", "k1", "k2"])))
        elif op < 0.68 and apps:
            h.do(RemoveApp(apps.pop(rnd.randrange(len(apps)))))
        elif op < 0.72 and nodes:
            h.do(RemoveNode(nodes.pop(rnd.randrange(len(nodes)))))
        elif op < 0.78 and nodes:
            h.do(UpdateNode(rnd.choice(nodes), capacity=Resource({"memory": rnd.randint(10, 200), "vcore": 10})))
        elif op < 0.82 and nodes:
            h.do(rnd.choice([DrainNode, UndrainNode])(rnd.choice(nodes)))
        else:
            h.step(rnd.randint(0, 3) * SECOND)
        check_books(h)
    h.step(40 * SECOND)
    check_books(h)
    for _ in range(10):  # without new input the partition settles: no endless cycles
        if not h.p.changed:
            break
        h.step()
    assert not h.p.changed


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", ["fair", "binpacking"])
def test_the_chosen_node_is_the_best_by_a_full_sort(seed, policy) -> None:
    """The incremental order (with set-aside nodes) picks what a full sort would pick."""
    rnd = random.Random(100 + seed)
    h = Harness(partition_config(policy=policy))
    for i in range(40):
        h.node(f"n{i:02d}", memory=rnd.randint(50, 300), vcore=rnd.randint(5, 30))
    h.app("app1")
    coll = h.p.nodes
    for step in range(200):
        if rnd.random() < 0.15:
            nid = f"n{rnd.randrange(40):02d}"
            h.do(rnd.choice([DrainNode, UndrainNode])(nid))
        if rnd.random() < 0.2 and h.p.allocations:
            a = rnd.choice(list(h.p.allocations.values()))
            h.do(ReleaseAlloc(a.app_id, a.uuid))
        r = Resource({"memory": rnd.randint(1, 40), "vcore": rnd.randint(1, 5)})
        eligible = [n for n in coll.nodes.values() if n.usable and n.reservation is None
                    and r.fits_in(n.available)]
        expected = min(eligible, key=lambda n: (coll._score(n), n.node_id)).node_id if eligible else None
        before = len(h.log.allocations)
        h.do(AddAsk(f"k{step}", "app1", r))
        h.step()
        got = h.log.allocations[before].alloc.node_id if len(h.log.allocations) > before else None
        assert got == expected, (step, got, expected)
        if got is None:
            h.do(ReleaseAsk("app1", f"k{step}"))
