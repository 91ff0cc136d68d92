"""Test doubles for driving ``SimCluster`` by hand: a settable clock and a recording sender."""

from __future__ import annotations


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Sender:
    """Records every request the sim sends, as (``allocation``|``application``|``node``, request)."""

    def __init__(self):
        self.sent = []

    def update_allocation(self, r):
        self.sent.append(("allocation", r))

    def update_application(self, r):
        self.sent.append(("application", r))

    def update_node(self, r):
        self.sent.append(("node", r))

    def asks(self) -> list[str]:
        return [a.allocationKey for k, r in self.sent if k == "allocation" for a in r.asks]

    def releases(self) -> list:
        return [x for k, r in self.sent if k == "allocation" for x in r.releases.allocationsToRelease]
