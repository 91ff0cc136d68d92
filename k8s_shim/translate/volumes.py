"""The volume claims pods use, and what keeps a pod with claims from being placed.

``Volumes`` keeps the claims and storage classes the informers show, and which pods use which
claim. ``waits(namespace, claims, best_effort)`` names what a pod's claims hold it back for:
a claim that does not exist or is being deleted, an unbound claim of an immediate-binding class
(until its volume is bound), and an unbound ``WaitForFirstConsumer`` claim, which Korral does
not evaluate (left out with ``--best-effort-constraints``: ``to_place`` then lists it, to get the
node before the binding). A change of a claim or class returns the pods to look at again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Claim", "Volumes"]

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


@dataclass(frozen=True, slots=True)
class Claim:
    bound: bool
    storage_class: str
    deleting: bool


@dataclass(slots=True)
class Volumes:
    claims: dict[str, Claim] = field(default_factory=dict)  # "ns/name" -> claim
    storage_classes: dict[str, str] = field(default_factory=dict)  # name -> volumeBindingMode
    users: dict[str, set[str]] = field(default_factory=dict)  # "ns/name" -> uids of the pods using it

    def use(self, uid: str, namespace: str, claims: tuple[str, ...]) -> None:
        for name in claims:
            self.users.setdefault(f"{namespace}/{name}", set()).add(uid)

    def release(self, uid: str, namespace: str, claims: tuple[str, ...]) -> None:
        for name in claims:
            self.users.get(f"{namespace}/{name}", set()).discard(uid)

    def _unbound_wffc(self, claim: Claim) -> bool:
        return not claim.bound and self.storage_classes.get(claim.storage_class) == WAIT_FOR_FIRST_CONSUMER

    def waits(self, namespace: str, claims: tuple[str, ...], best_effort: bool) -> list[str]:
        found = []
        for name in claims:
            claim = self.claims.get(f"{namespace}/{name}")
            if claim is None:
                found.append(f"persistentvolumeclaim {name} not found")
            elif claim.deleting:
                found.append(f"persistentvolumeclaim {name} is being deleted")
            elif self._unbound_wffc(claim):
                if not best_effort:
                    found.append(f"unbound WaitForFirstConsumer volume claim {name}")
            elif not claim.bound:
                found.append(f"unbound immediate persistentvolumeclaim {name}")
        return found

    def to_place(self, namespace: str, claims: tuple[str, ...]) -> tuple[str, ...]:
        """The unbound WaitForFirstConsumer claims among ``claims``."""
        return tuple(n for n in claims if (c := self.claims.get(f"{namespace}/{n}")) is not None
                     and self._unbound_wffc(c))

    def claim_changed(self, old: tuple[str, Claim] | None, new: tuple[str, Claim] | None) -> set[str]:
        if new is None:
            self.claims.pop(old[0], None)
            return set(self.users.get(old[0], ()))
        self.claims[new[0]] = new[1]
        return set(self.users.get(new[0], ()))

    def storage_class_changed(self, old: tuple[str, str] | None, new: tuple[str, str] | None) -> set[str]:
        if new is None:
            self.storage_classes.pop(old[0], None)
        else:
            self.storage_classes[new[0]] = new[1]
        return {uid for uids in self.users.values() for uid in uids}
