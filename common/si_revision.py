"""The SI revisions Korral serves on one gRPC port, and how an RM declares its own.

``seed`` is the Scheduler Interface of seed 000 (scheduler-interface commit fa28d99,
``common/si.proto``); ``v1.8`` is scheduler-interface v1.8.0 (``common/si_v18.proto``). An RM may
declare its revision at registration with the ``buildInfo`` key ``si.revision``; otherwise
rmproxy decides it from the first message that only one revision can send. The rule is in
docs/si-revisions.md; rmproxy applies it (``rmproxy.revision``), the worker answers in
the decided revision (``partition_worker.si_dialects``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Mapping

__all__ = ["Revision", "DECLARATION_KEY", "declared_revision", "allowed"]

DECLARATION_KEY = "si.revision"  # RegisterResourceManagerRequest.buildInfo key


class Revision(StrEnum):
    SEED = "seed"
    V18 = "v1.8"


def allowed() -> str:
    """The declarable values, for messages."""
    return ", ".join(r.value for r in Revision)


def declared_revision(build_info: Mapping[str, str]) -> Revision | None:
    """The revision the registration declares in ``buildInfo``, None when it declares none.
    ValueError naming the key and the allowed values for anything else."""
    value = build_info.get(DECLARATION_KEY)
    if value is None or value == "":
        return None
    try:
        return Revision(value)
    except ValueError:
        raise ValueError(f"buildInfo {DECLARATION_KEY}={value!r} is not an SI revision Korral speaks: "
                         f"use one of {allowed()}, or leave it out and Korral tells the revision from "
                         "the RM's first messages") from None
