"""The errors of an RM operation, each named for what failed, with the gRPC status to answer, and
the words they share: what to do without a worker, how a resync's details begin, and why an
operator's config change that removes a partition must be asked for explicitly
(``removal_refusal``: ``config_changes`` enforces it, the admin endpoint's dry run reports it)."""

from __future__ import annotations

import grpc

__all__ = ["RMOperationError", "RegistrationError", "ConfigUpdateError", "NO_WORKER_ADVICE", "RESYNC_DETAILS",
           "ALLOW_REMOVAL_FLAG", "ALLOW_REMOVAL_PARAM", "removal_refusal"]

NO_WORKER_ADVICE = "start more workers (korral up --workers N, or korral worker on another host)"
RESYNC_DETAILS = "korral: re-register: "  # how the details of an RM's streams ended for a resync begin
ALLOW_REMOVAL_FLAG = "--allow-partition-removal"  # korral config apply|rollback
ALLOW_REMOVAL_PARAM = "allowPartitionRemoval"  # the admin endpoint's query parameter


class RMOperationError(Exception):
    """An RM's operation failed; ``code`` is the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class RegistrationError(RMOperationError):
    """``RegisterResourceManager`` failed: the RM registers again (or fixes its request)."""


class ConfigUpdateError(RMOperationError):
    """A config update (the RM's ``UpdateConfiguration``, an operator's change) failed, and the
    RM's registration and partitions are as they were (or, for new partitions without a worker,
    the message says what stands)."""


def removal_refusal(rm_id: str, text: str, removed: dict[str, dict | str]) -> str:
    """Why a change of RM ``rm_id``'s config to ``text`` must be asked for explicitly, or "" when it
    need not: ``text`` is empty (the scheduler would serve its default config), or it removes a
    partition holding nodes or applications. ``removed``: each partition the change removes ->
    its removal what-if ({"nodes", "applications", "allocations"}) or why that is unknown."""
    holding = []
    for name, held in sorted(removed.items()):
        if isinstance(held, str):
            holding.append(f"[{rm_id}]{name} (what it holds is unknown: {held})")
        elif held.get("nodes") or held.get("applications"):
            holding.append(f"[{rm_id}]{name} with {held.get('nodes', 0)} nodes, {held.get('applications', 0)} "
                           f"applications and {held.get('allocations', 0)} allocations")
    reasons = []
    if not text.strip():
        reasons.append("the config is empty: the scheduler would serve its default config (one partition, "
                       "default, with only the root queue)")
    if holding:
        reasons.append(f"it removes partition {'; '.join(holding)}: their applications fail (PartitionRemoved) "
                       "and their nodes and allocations go")
    if not reasons:
        return ""
    return (f"config change of RM {rm_id} refused: {'; and '.join(reasons)}. To make it anyway: korral config "
            f"apply|rollback {ALLOW_REMOVAL_FLAG} (admin endpoint: ?{ALLOW_REMOVAL_PARAM}=true)")
