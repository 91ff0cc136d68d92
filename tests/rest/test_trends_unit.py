"""The dashboard's trends: samples of a partition as chart columns (no stack needed)."""

from __future__ import annotations

from rmproxy.webapi.trends import TRENDS_QUEUES, columns

S = 1_000_000_000


def sample(allocated, pending, **queues):
    return {"allocated": allocated, "pendingAsks": pending, "queues": queues}


def test_allocations_per_second_come_from_the_workers_count_between_samples():
    got = columns([(100 * S, sample(10, 5)), (110 * S, sample(60, 3)), (120 * S, sample(4, 0)),
                   (130 * S, None), (140 * S, sample(None, 1))])
    assert got["times"] == [100.0, 110.0, 120.0, 140.0]  # the partition did not answer at 130 s
    # 50 in 10 s; then the count restarted (a new worker): 4 since; no count, no rate
    assert got["allocationsPerSecond"] == [None, 5.0, 0.4, None]
    assert got["pendingAsks"] == [5, 3, 0, 1]


def test_queue_columns_give_used_guaranteed_and_max_per_resource():
    a1 = ({"memory": 10}, {"memory": 40}, {"memory": 100, "vcore": 8})
    a2 = ({"memory": 30, "vcore": 2}, {"memory": 40}, {"memory": 100, "vcore": 8})
    got = columns([(1 * S, sample(0, 0, **{"root": ({}, {}, {}), "root.a": a1})),
                   (2 * S, sample(0, 0, **{"root": ({"memory": 30}, {}, {}), "root.a": a2}))])
    assert got["queues"]["root.a"] == {"memory": {"used": [10, 30], "guaranteed": [40, 40], "max": [100, 100]},
                                       "vcore": {"used": [0, 2], "guaranteed": [None, None], "max": [8, 8]}}
    assert got["queues"]["root"] == {"memory": {"used": [0, 30], "guaranteed": [None, None], "max": [None, None]}}


def test_at_most_the_shallowest_queues_are_charted():
    many = {f"root.q{i:03}.leaf": ({}, {}, {}) for i in range(TRENDS_QUEUES)} | {"root": ({}, {}, {}),
                                                                             "root.top": ({}, {}, {})}
    got = columns([(1 * S, sample(0, 0, **many))])
    assert len(got["queues"]) == TRENDS_QUEUES and {"root", "root.top"} <= set(got["queues"])
