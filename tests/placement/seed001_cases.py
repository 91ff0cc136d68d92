"""Every worked example of seed 001 (placement rules) as data, for unit and end-to-end tests.

Each case gives a complete queues.yaml (partition ``default``), the application
as submitted (user, groups, queue, tags) and the exact outcome: the full queue
path, or ``None`` for a rejection with ``reason``. The seed shows only the
``placementrules`` of most examples; the queues each one needs to give its
stated result are added and explained in ``note``. Through the SI, ``user`` and
``groups`` go in ``AddApplicationRequest.ugi``, ``queue`` in ``queueName`` and
``tags`` in ``tags`` (the k8s shim sets ``namespace``).

Through the core, a rejection's ``RejectedApplication.reason`` is
``failed to place application <applicationID>: <reason>``; an accepted app's
queue is ``expected`` (lower-case full path).

Reused by the lead's gRPC end-to-end test: import ``SEED001_CASES``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tests.queues_yaml import open_root, queues_yaml

__all__ = ["PlacementCase", "SEED001_CASES", "NO_MATCH"]

NO_MATCH = "application rejected: no placement rule matched"


@dataclass(frozen=True)
class PlacementCase:
    id: str
    config: str
    user: str
    groups: tuple[str, ...] = ()
    queue: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    expected: str | None = None  # None: the application is rejected
    reason: str = ""  # the placement reason when rejected
    note: str = ""


PROVIDED = queues_yaml(open_root(rules="""
- name: provided
  create: true
  parent:
    name: user
    create: true
"""))

USER = queues_yaml(open_root("""
- name: finance_dot_test
""", rules="""
- name: user
  create: false
"""))

FIXED = queues_yaml(open_root("""
- name: last_resort
""", rules="""
- name: fixed
  value: last_resort
"""))

TAG = queues_yaml(open_root(rules="""
- name: tag
  value: namespace
  create: true
"""))

# The placement rules exactly as the seed writes them (parent as a one-element list).
COMPLEX_1 = queues_yaml(open_root("""
- name: namespaces
  parent: true
- name: newapp
  parent: true
- name: default
""", rules="""
- name: user
  create: true
  filter:
    type: allow
    groups:
      - dev*
  parent:
    - name: tag
      value: namespace
- name: tag
  value: namespace
  create: true
  parent:
    - name: fixed
      value: root.namespaces
      filter:
        type: allow
        users:
          - john
- name: fixed
  value: root.default
"""))

# Exactly the seed's second example: root is inserted and has no ACL (deny all).
COMPLEX_2 = """
partitions:
  - name: default
    queues:
      - name: production
        submitacl: john,bob
    placementrules:
      - name: fixed
        value: root.production
      - name: user
        create: true
"""

# The second example with an open root: the ACL check walks up to root, which then lets anyone in.
COMPLEX_2_OPEN_ROOT = queues_yaml(open_root("""
- name: production
  submitacl: john,bob
""", rules="""
- name: fixed
  value: root.production
- name: user
  create: true
"""))

SEED001_CASES: tuple[PlacementCase, ...] = (
    PlacementCase(
        "provided: unqualified queue goes below the user parent",
        PROVIDED, user="developer", queue="my_special_queue",
        expected="root.developer.my_special_queue",
        note="parent rule user (create) gives root.developer; both queues are created",
    ),
    PlacementCase(
        "provided: qualified queue skips the parent rule",
        PROVIDED, user="developer", queue="root.dev_queue", expected="root.dev_queue",
    ),
    PlacementCase(
        "user: dot in the user name becomes _dot_",
        USER, user="finance.test", expected="root.finance_dot_test",
        note="the queue root.finance_dot_test is configured, create is false",
    ),
    PlacementCase(
        "user: queue does not exist and create is false",
        USER, user="developer", expected=None, reason=NO_MATCH,
        note="the seed says 'failed, next rule executed'; with no next rule the app is rejected",
    ),
    PlacementCase(
        "fixed: always the configured queue",
        FIXED, user="developer", queue="my_special_queue", expected="root.last_resort",
    ),
    PlacementCase(
        "tag: namespace default",
        TAG, user="developer", queue="my_special_queue", tags={"namespace": "default"}, expected="root.default",
    ),
    PlacementCase(
        "tag: namespace testing",
        TAG, user="developer", tags={"namespace": "testing"}, expected="root.testing",
    ),
    PlacementCase(
        "tag: no namespace tag",
        TAG, user="developer", expected=None, reason=NO_MATCH,
        note="a non-kubernetes app has no namespace tag: the rule fails, no next rule",
    ),
    PlacementCase(
        "complex 1: john in testing matches rule 2",
        COMPLEX_1, user="john", groups=("john",), tags={"namespace": "testing"},
        expected="root.namespaces.testing",
        note="root.namespaces must exist (the fixed parent rule does not create)",
    ),
    PlacementCase(
        "complex 1: sarah of dev_app in newapp matches rule 1",
        COMPLEX_1, user="sarah", groups=("sarah", "test_app", "dev_app"), tags={"namespace": "newapp"},
        expected="root.newapp.sarah",
        note="the tag parent rule does not create, so root.newapp must exist as a parent queue",
    ),
    PlacementCase(
        "complex 1: bob in testapp falls through to rule 3",
        COMPLEX_1, user="bob", groups=("bob",), tags={"namespace": "testapp"},
        expected="root.default",
        note="the seed's result reads 'root.deault', a typo for root.default",
    ),
    PlacementCase(
        "complex 2: john may use production",
        COMPLEX_2, user="john", expected="root.production",
    ),
    PlacementCase(
        "complex 2: bob may use production",
        COMPLEX_2, user="bob", groups=("bob",), expected="root.production",
    ),
    PlacementCase(
        "complex 2: alice is refused production and root denies creating root.alice",
        COMPLEX_2, user="alice", groups=("alice",), expected=None, reason=NO_MATCH,
        note=(
            "the seed's text says other users get their own queue, but with the config as written root "
            "has no ACL, and the ACL rules of the same seed check root for a queue that does not exist yet"
        ),
    ),
    PlacementCase(
        "complex 2 with an open root: alice gets production through root's ACL",
        COMPLEX_2_OPEN_ROOT, user="alice", groups=("alice",), expected="root.production",
        note="ACLs are checked up to root until one grants, so an open root opens production too",
    ),
)
