"""One config change scenario, evaluated by the core's what-if (tests/core/test_whatif.py) and through
``korral config`` on a running stack (tests/e2e/test_config_admin.py).

``LIVE``: placement by the provided queue; root.a (guaranteed memory 100, max 1000), root.b,
root.c. ``NEW``: bob's apps go to root.d (fixed rule), root.a's max drops to 200 with a limit of
memory 250 and one app for alice, root.b and root.c leave the config, root.d comes."""

from __future__ import annotations

__all__ = ["LIVE", "NEW"]

LIVE = """
partitions:
  - name: default
    placementrules:
      - {name: provided, create: false}
    queues:
      - name: root
        submitacl: '*'
        queues:
          - {name: a, resources: {guaranteed: {memory: 100}, max: {memory: 1000}}}
          - {name: b}
          - {name: c}
"""

NEW = """
partitions:
  - name: default
    placementrules:
      - {name: fixed, value: root.d, filter: {type: allow, users: [bob]}}
      - {name: provided, create: false}
    queues:
      - name: root
        submitacl: '*'
        queues:
          - name: a
            resources: {guaranteed: {memory: 100}, max: {memory: 200}}
            limits:
              - {limit: alice, users: [alice], maxresources: {memory: 250}, maxapplications: 1}
          - {name: d}
"""
