"""Random command sequences with gangs, preemption and user/group limits keep the books
consistent, the limits held and the limit usage equal to a recount from scratch."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from common.config.model import LimitConfig, PreemptionConfig
from common.resources import Resource
from partition_worker.core import (AddApp, AddAsk, AddNode, CoreSettings, ReleaseAlloc,
                                   ReleaseAsk, RemoveApp)
from partition_worker.core.limits import LimitTracker
from partition_worker.core.outcomes import Termination
from tests.core.harness import SECOND, Harness, partition_config, q
from tests.core.test_invariants import check_books

USERS = ("u1", "u2", "u3")
GROUPS = (("g1",), ("g2", "g1"), ())


def _config():
    root = q("root",
             q("hi", guaranteed={"memory": 300}, limits=(LimitConfig(users=("*",), maxresources={"memory": 250}),)),
             q("lo", q("x", guaranteed={"memory": 50}), q("y"), parent=True,
               limits=(LimitConfig(groups=("g1",), maxresources={"memory": 400}, maxapplications=3),)),
             submitacl="*")
    return replace(partition_config(root), preemption=PreemptionConfig(enabled=True))


def _check_limits(h: Harness) -> None:
    lt = h.p.limits
    fresh = LimitTracker()
    fresh.active, fresh.by_path = lt.active, lt.by_path
    fresh.rebuild(h.p.apps.values())
    assert {k: (u.used.prune(), set(u.apps)) for k, u in lt.usage.items()} == \
        {k: (u.used.prune(), set(u.apps)) for k, u in fresh.usage.items()}
    for (path, kind, name), u in lt.usage.items():
        lim = lt.limit_for(path, kind, name)
        if lim is not None and lim.max is not None:
            assert u.used.get("memory") <= lim.max.get("memory"), (path, kind, name)
        if lim is not None and lim.max_apps:
            assert len(u.apps) <= lim.max_apps, (path, kind, name)


@pytest.mark.parametrize("seed", range(10))
def test_random_policy_commands_keep_the_books(seed) -> None:
    rnd = random.Random(seed)
    h = Harness(_config(), settings=CoreSettings(reservation_delay_ns=SECOND, preemption_delay_ns=SECOND,
                                                 placeholder_timeout_ns=20 * SECOND))
    for i in range(4):
        h.do(AddNode(f"n{i}", Resource({"memory": 200, "vcore": 200})))
    n_apps = 0
    for _ in range(300):
        r = rnd.random()
        apps = list(h.p.apps.values())
        if r < 0.12 or not apps:
            n_apps += 1
            app_id = f"app{n_apps}"
            i = rnd.randrange(3)
            queue = rnd.choice(("root.hi", "root.lo.x", "root.lo.y"))
            gang = rnd.random() < 0.3 and queue != "root.hi"
            h.do(AddApp(app_id, queue, USERS[i], groups=GROUPS[i],
                        placeholder_ask=Resource({"memory": 30, "vcore": 3}) if gang else Resource(),
                        gang_style=rnd.choice(("Soft", "Hard"))))
            if gang:
                h.do(AddAsk(f"{app_id}-ph", app_id, Resource({"memory": 10, "vcore": 1}), max_allocations=3,
                            placeholder=True, task_group="tg"))
                h.do(AddAsk(f"{app_id}-real", app_id, Resource({"memory": rnd.choice((8, 10, 12)), "vcore": 1}),
                            max_allocations=rnd.randint(1, 4), task_group="tg"))
        elif r < 0.5:
            app = rnd.choice(apps)
            h.do(AddAsk(f"k{rnd.randrange(10**6)}", app.app_id, Resource({"memory": rnd.choice((10, 20, 40)), "vcore": 1}),
                        max_allocations=rnd.randint(1, 5), priority=rnd.choice((0, 5)),
                        allow_preempt_self=rnd.random() < 0.8))
        elif r < 0.7:
            app = rnd.choice(apps)
            if app.allocations:
                uuid = rnd.choice(list(app.allocations))
                h.do(ReleaseAlloc(app.app_id, uuid, Termination.STOPPED_BY_RM))
        elif r < 0.75:
            app = rnd.choice(apps)
            if app.asks:
                h.do(ReleaseAsk(app.app_id, rnd.choice(list(app.asks)), Termination.STOPPED_BY_RM))
        elif r < 0.78:
            h.do(RemoveApp(rnd.choice(apps).app_id))
        h.step(rnd.choice((1, SECOND // 2, 2 * SECOND)))
        check_books(h)
        _check_limits(h)
        for app in h.p.apps.values():
            assert app.ph_alloc_count == sum(len(g) for g in app.placeholders.values())
            assert app.ph_pending == sum(a.pending for a in app.asks.values() if a.placeholder)
    assert h.log.allocations
