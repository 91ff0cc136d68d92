"""YuniKorn's health-check row, built in one place: ``{"Name", "Succeeded", "Description",
"DiagnosisMessage"}`` (capitalised keys, as YuniKorn's ``/ws/v1/scheduler/healthcheck`` sends)."""

from __future__ import annotations

__all__ = ["health_check"]


def health_check(name: str, description: str, problems: list[str], most: int | None = None) -> dict:
    """One check: it succeeded when there are no ``problems``; the diagnosis joins them with
    "; ", the first ``most`` of them and a count of the rest when ``most`` is given."""
    shown = problems if most is None or len(problems) <= most else problems[:most]
    more = f" (+{len(problems) - len(shown)} more)" if len(shown) < len(problems) else ""
    return {"Name": name, "Succeeded": not problems, "Description": description,
            "DiagnosisMessage": "; ".join(shown) + more}
