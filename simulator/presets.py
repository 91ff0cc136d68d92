"""Built-in workloads for ``korral sim --preset NAME``."""

from __future__ import annotations

__all__ = ["PRESETS"]

_DEMO = """
name: demo
seed: 42
duration: 45
config: |
  partitions:
    - name: default
      placementrules:
        - {name: provided, create: true}
      queues:
        - name: root
          submitacl: '*'
          queues:
            - name: a
            - name: b
              resources:
                max: {vcore: 200, memory: 800Gi}
    - name: edge
      placementrules:
        - {name: provided, create: true}
      queues:
        - name: root
          submitacl: '*'
nodes:
  - {name: core, count: 30, partition: default, resources: {vcore: 16, memory: 64Gi},
     attributes: {si/rackname: rack-1}}
  - {name: edge, count: 20, partition: edge, resources: {vcore: 8, memory: 32Gi},
     attributes: {si/rackname: rack-edge}}
apps:
  - {name: etl, count: 30, queue: root.a, partition: default, user: alice, groups: [data],
     namespace: team-a, arrival: {start: 0, interval: 0.8, jitter: 0.2}, tasks: [30, 50],
     resources: {vcore: 1, memory: 2Gi}, duration: [2, 5]}
  - {name: ml, count: 30, queue: root.b, partition: default, user: bob, groups: [science],
     namespace: team-b, arrival: {start: 0.4, interval: 0.8, jitter: 0.2}, tasks: [30, 50],
     resources: {vcore: 1, memory: 2Gi}, duration: [2, 5], priority: 10}
  - {name: edge-a, count: 15, queue: root.a, partition: edge, user: carol, namespace: team-a,
     arrival: {start: 0, interval: 1.6}, tasks: [30, 50], resources: {vcore: 500m, memory: 1Gi},
     duration: [2, 5]}
  - {name: edge-b, count: 15, queue: root.b, partition: edge, user: dave, namespace: team-b,
     arrival: {start: 0.8, interval: 1.6}, tasks: [30, 50], resources: {vcore: 500m, memory: 1Gi},
     duration: [2, 5]}
"""

_SMALL = """
name: small
seed: 7
duration: 20
nodes:
  - {name: n, count: 4, resources: {vcore: 4, memory: 8Gi}}
apps:
  - {name: a, count: 3, queue: root.a, user: alice, arrival: {interval: 0.2}, tasks: [4, 8],
     resources: {vcore: 1, memory: 1Gi}, duration: [0.2, 0.6]}
  - {name: b, count: 3, queue: root.b, user: bob, arrival: {start: 0.1, interval: 0.2}, tasks: [4, 8],
     resources: {vcore: 1, memory: 1Gi}, duration: [0.2, 0.6]}
"""

_BURST = """
name: burst
seed: 3
duration: 60
nodes:
  - {name: n, count: 200, resources: {vcore: 32, memory: 128Gi}}
apps:
  - {name: burst-a, count: 10, queue: root.a, user: alice, tasks: 500,
     resources: {vcore: 1, memory: 1Gi}, duration: [2, 5]}
  - {name: burst-b, count: 10, queue: root.b, user: bob, tasks: 500,
     resources: {vcore: 1, memory: 1Gi}, duration: [2, 5]}
"""

_GANG = """
name: gang-on-a-busy-cluster
seed: 5
duration: 90
config: |
  partitions:
    - name: default
      placementrules: [{name: provided, create: true}]
      queues:
        - name: root
          submitacl: '*'
          queues:
            - name: batch
            - name: train
              properties: {application.sort.policy: fifo}
nodes:
  - {name: n, count: 10, resources: {vcore: 8, memory: 16Gi}}
apps:
  # 80 slots; batch keeps arriving and keeps the cluster full while the gang assembles
  - {name: busy, count: 8, queue: root.batch, arrival: {interval: 0.5}, tasks: 20,
     resources: {vcore: 1, memory: 1Gi}, duration: [1, 3]}
  - {name: train, count: 1, queue: root.train, arrival: {start: 0.5}, tasks: 50,
     resources: {vcore: 1, memory: 1Gi}, duration: [1, 2],
     gang: {members: 50, style: Hard, timeout: 60, resources: {vcore: 1, memory: 1Gi}}}
"""

_PREEMPTION = """
name: reclaim-guarantee
seed: 9
duration: 90
config: |
  partitions:
    - name: default
      placementrules: [{name: provided, create: true}]
      preemption: {enabled: true}
      queues:
        - name: root
          submitacl: '*'
          queues:
            - name: high
              resources: {guaranteed: {vcore: 30, memory: 30Gi}}
              properties: {preemption.delay: 1s, priority.offset: "100"}
            - name: low
              resources: {guaranteed: {vcore: 10, memory: 10Gi}}
nodes:
  - {name: n, count: 4, resources: {vcore: 25, memory: 25Gi}}
apps:
  # low fills all 100 slots with long tasks; high arrives later and needs its guarantee of 30
  - {name: low, count: 1, queue: root.low, tasks: 100, resources: {vcore: 1, memory: 1Gi},
     duration: [6, 8]}
  - {name: high, count: 1, queue: root.high, arrival: {start: 1.5}, tasks: 30,
     resources: {vcore: 1, memory: 1Gi}, duration: 2}
"""


_LIMITS = """
name: user-limits
seed: 4
duration: 60
config: |
  partitions:
    - name: default
      placementrules: [{name: provided, create: true}]
      queues:
        - name: root
          submitacl: '*'
          queues:
            - name: shared
              limits:
                - {limit: alice, users: [alice], maxresources: {vcore: 4}}
                - {limit: everyone else, users: ["*"], maxresources: {vcore: 2}}
                - {limit: data team, groups: [data], maxapplications: 1}
nodes:
  - {name: n, count: 4, resources: {vcore: 8, memory: 16Gi}}
apps:
  # the cluster has room for 32 tasks; the limits allow alice 4, bob 2, carol 2 at a time,
  # and one running app at a time of the data group (dave's two apps run one after the other)
  - {name: alice, count: 2, queue: root.shared, user: alice, groups: [ml], tasks: 10,
     resources: {vcore: 1, memory: 1Gi}, duration: 0.5}
  - {name: bob, count: 1, queue: root.shared, user: bob, groups: [ml], tasks: 8,
     resources: {vcore: 1, memory: 1Gi}, duration: 0.5}
  - {name: carol, count: 1, queue: root.shared, user: carol, groups: [ml], tasks: 8,
     resources: {vcore: 1, memory: 1Gi}, duration: 0.5}
  - {name: dave, count: 2, queue: root.shared, user: dave, groups: [data], tasks: 2,
     resources: {vcore: 1, memory: 1Gi}, duration: 0.5}
"""


_BACKLOG = """
name: backlog
seed: 11
duration: 15
config: |
  # root.stuck: an app backs off for 30 s once 5 of its asks fit no node
  partitions:
    - {name: default, placementrules: [{name: provided, create: true}],
       queues: [{name: root, submitacl: '*', queues: [{name: work}, {name: stuck, properties: {
         application.unschedasks.backoff: "5", application.unschedasks.backoff.delay: 30s}}]}]}
nodes:
  - {name: n, count: 50, resources: {vcore: 8, memory: 16Gi}}
apps:
  # 5,000 asks larger than any node: they back off instead of costing every cycle
  - {name: stuck, count: 50, queue: root.stuck, tasks: 100, resources: {vcore: 1, memory: 64Gi}, duration: 1}
  - {name: work, count: 20, queue: root.work, arrival: {start: 1, interval: 0.3}, tasks: 20,
     resources: {vcore: 1, memory: 1Gi}, duration: [0.5, 1]}
"""

_QUOTA_CONFIG = """partitions:
  - name: default
    placementrules: [{{name: provided, create: true}}]
    preemption: {{quotapreemptionenabled: true}}
    queues:
      - name: root
        submitacl: '*'
        queues:
          - {{name: batch, resources: {{max: {{vcore: {max}}}}}, properties: {{quota.preemption.delay: 2s}}}}
"""


def _indented(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line for line in text.splitlines(keepends=True))


_QUOTA = f"""
name: quota-change
seed: 12
duration: 30
config: |
{_indented(_QUOTA_CONFIG.format(max=40), 2)}config_updates:
  - at: 5
    config: |
{_indented(_QUOTA_CONFIG.format(max=20), 6)}nodes:
  - {{name: n, count: 5, resources: {{vcore: 16, memory: 32Gi}}}}
apps:
  # batch fills its max of 40 with long tasks; at 5 s the max drops to 20; 2 s later quota
  # preemption takes 20 back (victims re-submitted, placed again only within the new max)
  - {{name: batch, count: 1, queue: root.batch, tasks: 60, resources: {{vcore: 1, memory: 1Gi}}, duration: [6, 8]}}
"""

_FOREIGN = """
name: foreign
seed: 13
duration: 20
nodes:
  # every node runs a pod of another scheduler taking half of it: only the rest is scheduled
  - {name: n, count: 10, resources: {vcore: 8, memory: 16Gi}, foreign: {vcore: 4, memory: 8Gi}}
apps:
  - {name: a, count: 4, queue: root.a, tasks: 30, resources: {vcore: 1, memory: 1Gi}, duration: [1, 2]}
"""


PRESETS: dict[str, tuple[str, str]] = {
    "demo": (_DEMO, "~3,600 tasks, 90 apps, queues root.a/root.b, partitions default/edge, ~30 s"),
    "small": (_SMALL, "6 apps, ~36 tasks on 4 nodes; a few seconds (smoke test)"),
    "burst": (_BURST, "10,000 tasks submitted at once into root.a/root.b on 200 nodes"),
    "gang": (_GANG, "a Hard gang of 50 (placeholders, then in-place replacement) on a cluster kept busy "
                    "by 160 batch tasks; ~10 s"),
    "preemption": (_PREEMPTION, "root.low fills the cluster; root.high (priority.offset 100) reclaims its "
                                "guarantee of 30 slots by preemption; victims re-submitted; ~13 s"),
    "backlog": (_BACKLOG, "5,000 asks that fit no node back off (application.unschedasks.backoff) while "
                          "400 schedulable tasks run beside them; ends at its duration (15 s)"),
    "quota": (_QUOTA, "a config update lowers root.batch's max from 40 to 20 vcore at 5 s; quota preemption "
                      "brings it back under after 2 s; ~20 s"),
    "foreign": (_FOREIGN, "each node runs a foreign pod (another scheduler's) taking half of it; the checks "
                          "count it on its node; ~10 s"),
    "limits": (_LIMITS, "user and group limits in one queue (alice 4 vcore, others 2, the data group one "
                        "running app); the summary shows each limit's peak; ~5 s"),
}
