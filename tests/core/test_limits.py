"""User/group limits (YuniKorn v1.3 ugm enforcement) on the core, with the fake clock."""

from __future__ import annotations

from common.config.model import LimitConfig
from partition_worker.core import AddApp, ReleaseAlloc
from partition_worker.core.outcomes import Termination
from tests.core.harness import Harness, harness_from_yaml, partition_config, q

YAML = """
partitions:
  - name: default
    limits:
      - limit: partition cap for bob
        users: [bob]
        maxresources: {memory: 50}
    queues:
      - name: root
        submitacl: "*"
        queues:
          - name: a
            parent: true
            limits:
              - limit: per user in a
                users: ["*"]
                maxresources: {memory: 30}
              - limit: carol may use more
                users: [carol]
                maxresources: {memory: 60}
              - limit: devs
                groups: [devs]
                maxresources: {memory: 40}
            queues:
              - name: leaf
                limits:
                  - limit: two apps each
                    users: ["*"]
                    maxapplications: 2
          - name: b
            limits:
              - limit: any group
                groups: ["*"]
                maxresources: {memory: 20}
          - name: c
"""


def _h() -> Harness:
    h = harness_from_yaml(YAML)
    h.node("n1", memory=1000, vcore=1000)
    return h


def _held(h: Harness, key: str) -> str:
    ask = next(a for app in h.p.apps.values() for k, a in app.asks.items() if k == key)
    return ask.sched_reason


def test_wildcard_user_limit_holds_at_parent_level_with_event():
    h = _h()
    h.app("app1", "root.a.leaf", "alice")
    h.ask("k1", "app1", memory=10, repeat=5)
    h.step()
    assert len(h.allocs_of("k1")) == 3  # 30 of alice's wildcard limit in root.a
    ev = h.events("UserLimitReached")
    assert len(ev) == 1 and "user alice (wildcard *)" in ev[0].message
    assert "queue root.a " in ev[0].message and "maxresources" in ev[0].message
    assert "root.a" in _held(h, "k1")
    h.step(1)  # nothing changed: no second event, still held
    assert len(h.events("UserLimitReached")) == 1 and len(h.allocs_of("k1")) == 3


def test_named_user_beats_wildcard_and_other_users_are_separate():
    h = _h()
    h.app("app1", "root.a.leaf", "carol")
    h.app("app2", "root.a.leaf", "dave")
    h.ask("c", "app1", memory=10, repeat=10)
    h.ask("d", "app2", memory=10, repeat=10)
    h.step()
    assert len(h.allocs_of("c")) == 6 and len(h.allocs_of("d")) == 3


def test_partition_level_limit_applies_at_root():
    h = _h()
    h.app("app1", "root.c", "bob").ask("k", "app1", memory=10, repeat=10).step()
    # root limit 50 for bob; root.c has no limits of its own
    assert len(h.allocs_of("k")) == 5
    assert "queue root " in h.events("UserLimitReached")[0].message


def test_group_is_first_group_with_a_limit():
    h = _h()
    h.do(AddApp("app1", "root.a.leaf", "erin", groups=("staff", "devs")))
    h.do(AddApp("app2", "root.a.leaf", "frank", groups=("devs",)))
    h.ask("e", "app1", memory=10, repeat=3)
    h.step()
    h.ask("f", "app2", memory=10, repeat=3)
    h.step()
    # devs share 40 in root.a; erin took 30 (her user wildcard cap), frank gets 10
    assert len(h.allocs_of("e")) == 3 and len(h.allocs_of("f")) == 1
    ev = h.events("GroupLimitReached")
    assert ev and "group devs" in ev[-1].message and "root.a" in ev[-1].message
    assert h.p.limits.group_of(h.p.apps["app1"]) == "devs"


def test_group_wildcard_limits_each_group_separately():
    h = _h()
    h.do(AddApp("app1", "root.b", "u1", groups=("g1",)))
    h.do(AddApp("app2", "root.b", "u2", groups=("g1",)))
    h.do(AddApp("app3", "root.b", "u3", groups=("g2",)))
    for app in ("app1", "app2", "app3"):
        h.ask(f"k-{app}", app, memory=10, repeat=2)
    h.step()
    g1 = len(h.allocs_of("k-app1")) + len(h.allocs_of("k-app2"))
    assert g1 == 2 and len(h.allocs_of("k-app3")) == 2


def test_maxapplications_per_user_in_nested_leaf():
    h = _h()
    for i in range(3):
        h.app(f"app{i}", "root.a.leaf", "gina")
        h.ask(f"k{i}", f"app{i}", memory=1)
        h.step(1)
    assert [len(h.allocs_of(f"k{i}")) for i in range(3)] == [1, 1, 0]
    assert "maxapplications 2" in _held(h, "k2")
    # another repeat of an app already running is not a new app
    h.ask("k0b", "app0", memory=1)
    h.step(1)
    assert len(h.allocs_of("k0b")) == 1


def test_pending_ask_proceeds_when_usage_drops():
    h = _h()
    h.app("app1", "root.a.leaf", "alice")
    h.ask("k1", "app1", memory=10, repeat=4)
    h.step()
    assert len(h.allocs_of("k1")) == 3
    first = h.allocs_of("k1")[0]
    h.do(ReleaseAlloc("app1", first.uuid, Termination.STOPPED_BY_RM))
    h.step(1)
    assert len(h.allocs_of("k1")) == 4
    assert h.p.limits.usage[("root.a", "user", "alice")].used.get("memory") == 30


def test_config_update_adds_a_limit_and_rebuilds_usage():
    h = Harness()
    h.node("n1")
    h.app("app1", "root.default", "alice")
    h.ask("k", "app1", memory=10, repeat=2)
    h.step()
    assert len(h.allocs_of("k")) == 2 and not h.p.limits.active
    cfg = partition_config(q("root", q("default", limits=(LimitConfig(users=("alice",), maxresources={"memory": 25}),)),
                             submitacl="*"))
    h.p.update_config(cfg, h.now)
    assert h.p.limits.usage[("root.default", "user", "alice")].used.get("memory") == 20
    h.ask("k2", "app1", memory=10, repeat=2)
    h.step(1)
    assert len(h.allocs_of("k2")) == 0
    assert "user alice in queue root.default" in h.events("UserLimitReached")[0].message


def test_usage_view_names_resolved_group_and_limits():
    from partition_worker.core import dao
    h = _h()
    h.do(AddApp("app1", "root.a.leaf", "erin", groups=("staff", "devs")))
    h.ask("e", "app1", memory=10, repeat=2)
    h.step()
    view = dao.usage_dao(h.p)
    user = next(u for u in view["users"] if u["userName"] == "erin")
    assert user["groups"] == {"app1": "devs"}
    a = user["queues"]["children"][0]
    assert a["queuePath"] == "root.a" and a["maxResources"] == {"memory": 30}  # flat maps (YuniKorn 1.4+)
    assert a["resourceUsage"]["memory"] == 20
    leaf = a["children"][0]
    assert leaf["maxApplications"] == 2 and leaf["runningApplications"] == ["app1"]
    group = next(g for g in view["groups"] if g["groupName"] == "devs")
    assert group["queues"]["children"][0]["maxResources"] == {"memory": 40}


def test_explain_names_the_limit():
    from partition_worker.core.diagnosis import explain
    h = _h()
    h.app("app1", "root.a.leaf", "alice")
    h.ask("k1", "app1", memory=10, repeat=4)
    h.step()
    app = h.p.apps["app1"]
    why = explain(h.p.nodes, h.p.apps, h.p.limits, app, app.asks["k1"])
    assert "user alice (wildcard *) in queue root.a" in why["limitBlockedBy"]


def test_recovered_app_usage_counts_for_its_user_once_added():
    from partition_worker.core import RecoveredAlloc
    from common.resources import Resource
    h = _h()
    ra = RecoveredAlloc(uuid="r1", key="k0", app_id="app1", resource=Resource({"memory": 30, "vcore": 1}),
                        node_id="n2")
    h.node("n2", memory=100, existing=(ra,))
    h.app("app1", "root.a.leaf", "alice")
    assert h.p.limits.usage[("root.a", "user", "alice")].used.get("memory") == 30
    h.ask("k1", "app1", memory=10)
    h.step()
    assert not h.allocs_of("k1") and h.events("UserLimitReached")
