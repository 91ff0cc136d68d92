"""The Status bodies a kube-apiserver answers with, built in one place.

Every failure in the double is an :class:`ApiError`; the server turns it into the JSON ``Status``
a real v1.24 server sends (same key order, same ``details`` presence rules: 401 and 400 carry no
details, 405/406/415 carry ``{}``, 404/409 name the plural resource, 422 names the Kind and lists
causes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ApiError", "Resource", "status_body", "success_status"]


@dataclass(frozen=True, slots=True)
class Resource:
    """What an error message needs to know about a resource: its plural name and group."""

    plural: str
    group: str = ""

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def details(self, name: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if name:
            out["name"] = name
        if self.group:
            out["group"] = self.group
        out["kind"] = self.plural
        return out


_NO_DETAILS = object()


@dataclass(slots=True)
class ApiError(Exception):
    code: int
    reason: str
    message: str
    details: Any = _NO_DETAILS
    extra_metadata: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return status_body(self.code, self.reason, self.message, self.details, self.extra_metadata)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    # -- the answers a real server gives, by reason --------------------------------------------

    @classmethod
    def not_found(cls, res: Resource, name: str) -> "ApiError":
        return cls(404, "NotFound", f'{res.qualified} "{name}" not found', res.details(name))

    @classmethod
    def already_exists(cls, res: Resource, name: str) -> "ApiError":
        return cls(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', res.details(name))

    @classmethod
    def conflict(cls, res: Resource, name: str, why: str, kind: str | None = None) -> "ApiError":
        details = res.details(name)
        if kind:
            details["kind"] = kind
        label = kind or res.qualified
        return cls(409, "Conflict", f'Operation cannot be fulfilled on {label} "{name}": {why}', details)

    @classmethod
    def modified(cls, res: Resource, name: str) -> "ApiError":
        return cls.conflict(res, name, "the object has been modified; please apply your changes to the "
                                       "latest version and try again")

    @classmethod
    def invalid(cls, kind: str, name: str, causes: list[tuple[str, str, str]], group: str = "") -> "ApiError":
        """causes: (reason, field, message) triples, e.g. ("FieldValueRequired", "spec.containers",
        "Required value")."""
        parts = [f"{f}: {m}" for _, f, m in causes]
        joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        details: dict[str, Any] = {}
        if name:
            details["name"] = name
        if group:
            details["group"] = group
        details["kind"] = kind
        kind = f"{kind}.{group}" if group else kind
        details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
        return cls(422, "Invalid", f'{kind} "{name}" is invalid: {joined}', details)

    @classmethod
    def bad_request(cls, message: str) -> "ApiError":
        return cls(400, "BadRequest", message)

    @classmethod
    def forbidden(cls, res: Resource, name: str, why: str, causes: list[dict] | None = None) -> "ApiError":
        details = res.details(name)
        if causes:
            details["causes"] = causes
        return cls(403, "Forbidden", f'{res.qualified} "{name}" is forbidden: {why}', details)

    @classmethod
    def method_not_allowed(cls) -> "ApiError":
        return cls(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})

    @classmethod
    def unknown_resource(cls) -> "ApiError":
        return cls(404, "NotFound", "the server could not find the requested resource", {})

    @classmethod
    def unauthorized(cls) -> "ApiError":
        return cls(401, "Unauthorized", "Unauthorized")

    @classmethod
    def expired(cls, message: str, **metadata: Any) -> "ApiError":
        return cls(410, "Expired", message, _NO_DETAILS, metadata)

    @classmethod
    def internal(cls, message: str) -> "ApiError":
        """A v1.24 quirk kept on purpose: some validation errors come back unwrapped as a 500
        Status without a reason (non-numeric resourceVersion, a Binding without a target)."""
        return cls(500, "", message)


def status_body(code: int, reason: str, message: str, details: Any = _NO_DETAILS,
                metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": dict(metadata or {}),
                            "status": "Failure", "message": message}
    if reason:
        body["reason"] = reason
    if details is not _NO_DETAILS:
        body["details"] = details
    body["code"] = code
    return body


def success_status(code: int | None = None, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Success Status: a binding's has ``code`` 201 and no details, a delete's has details and
    no code (as recorded)."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        body["details"] = details
    if code is not None:
        body["code"] = code
    return body
