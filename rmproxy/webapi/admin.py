"""The admin endpoint: an RM's config read, changed, previewed and rolled back by an operator
(``korral config get|apply|diff|history|rollback``, ``apply --dry-run``).

Paths (``/ws/v1/korral/admin/config/{rmID}``, every one authenticated by ``AdminAuth``):

- ``GET``: the active config as the scheduler serves it (the default config's text when the RM's
  is empty: ``default`` true), its checksum (the one ``/ws/v1/config`` shows), policy group and
  extraConfig.
- ``PUT`` (body: the queues.yaml text; ``If-Match: <checksum read>``): apply it through
  ``ConfigChanges.change`` (the path of the RM's own ``UpdateConfiguration``: validated exactly
  as at registration, compare-and-swap on the checksum, a no-op when unchanged, audited). An
  empty config, or one removing a partition that holds nodes or applications, is refused (409
  naming what would go) unless ``?allowPartitionRemoval=true``.
- ``POST .../dry-run`` (body: the text): what it would do to the live partitions, and
  ``refusal``: why applying it needs ``allowPartitionRemoval`` ("" when it does not); nothing changes.
- ``GET .../history``: the audit records, oldest first (without the texts they replaced).
- ``POST .../rollback/{n}`` (``If-Match``, ``?allowPartitionRemoval=true`` as for ``PUT``):
  restore the config that change ``n`` replaced.

Only the rmproxy holding the RM's session applies changes (421 names the one that does);
reads and the history work on any rmproxy. Errors use YuniKorn's error body: 400 invalid
config, 401 no or wrong credentials, 403 endpoint disabled, 404 unknown RM or change, 409 a
stale checksum (both checksums named), 413 a config over ``MAX_CONFIG_BYTES``, 428 no If-Match.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from typing import Mapping

import grpc
from aiohttp import web

from common import si_pb2
from common.config import MAX_CONFIG_BYTES, config_checksum, load_config
from common.config.errors import ConfigError
from common.config.loader import served_text
from common.messages import WhatIfQuery
from common.registry import ConfigRecord
from common.security import SecurityError, read_admin_tokens
from rmproxy.errors import ALLOW_REMOVAL_PARAM, ConfigUpdateError, removal_refusal
from rmproxy.rms import RMSession
from rmproxy.webapi._http import ApiError, json_response
from rmproxy.webapi.cluster import ClusterReader
from rmproxy.webapi.seams import ConfigChanger, Registrations

__all__ = ["AdminAuth", "AdminApi", "record_view"]

log = logging.getLogger("korral.rmproxy.admin")

_HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.ABORTED: 409,
                grpc.StatusCode.FAILED_PRECONDITION: 409, grpc.StatusCode.UNAVAILABLE: 503}


class AdminAuth:
    """Who may use the admin endpoint: a bearer token of ``token_file`` (``NAME:TOKEN`` lines,
    compared in constant time, the file re-read when it changes) or a TLS client certificate
    verified against the REST server's client CA (``client_certs``). Neither: disabled (403)."""

    def __init__(self, token_file: str | None = None, client_certs: bool = False) -> None:
        self.token_file = token_file
        self.client_certs = client_certs
        self._tokens: dict[str, str] = {}
        self._stamp: tuple[float, int] | None = None
        if token_file:
            try:
                self._reload()  # a bad file stops rmproxy at start, naming it
            except OSError as exc:
                raise SecurityError(f"--admin-token-file {token_file}: {exc.strerror}") from None

    @property
    def enabled(self) -> bool:
        return bool(self.token_file or self.client_certs)

    def describe(self) -> str:
        ways = [w for w, on in (("bearer tokens", self.token_file), ("client certificates", self.client_certs)) if on]
        return " and ".join(ways) if ways else "disabled"

    def _reload(self) -> None:
        assert self.token_file is not None
        st = os.stat(self.token_file)
        stamp = (st.st_mtime, st.st_size)
        if stamp != self._stamp:
            self._tokens = read_admin_tokens(self.token_file)
            self._stamp = stamp

    def _token_name(self, presented: str) -> str | None:
        try:
            self._reload()
        except (OSError, SecurityError) as exc:  # keep the tokens read before; say why once per change
            log.warning("admin token file %s unreadable, the tokens read before stay: %s", self.token_file, exc)
        found = None
        for name, token in self._tokens.items():  # every token compared: the time says nothing
            if hmac.compare_digest(presented.encode(), token.encode()):
                found = name
        return found

    def who(self, request: web.Request) -> str:
        """The caller's name (``token NAME`` or ``certificate SUBJECT``); ApiError 403 when the
        endpoint is disabled, 401 without accepted credentials."""
        if not self.enabled:
            raise ApiError(403, "the admin endpoint is disabled",
                           "start rmproxy with --admin-token-file FILE, or with --rest-tls-cert, --rest-tls-key "
                           "and --rest-tls-client-ca for client certificates")
        header = request.headers.get("Authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not self.token_file:
                raise ApiError(401, "admin credentials not accepted",
                               "this rmproxy takes Authorization: Bearer <token> only with --admin-token-file")
            name = self._token_name(token.strip())
            if name is None:
                raise ApiError(401, "admin token not accepted", "the token is not in rmproxy's --admin-token-file")
            return f"token {name}"
        cert = request.transport.get_extra_info("peercert") if self.client_certs and request.transport else None
        if cert:
            return "certificate " + ",".join(f"{k}={v}" for rdn in cert.get("subject", ()) for k, v in rdn)
        raise ApiError(401, "admin requests need credentials",
                       "send Authorization: Bearer <token> (a token of rmproxy's --admin-token-file) or a client "
                       "certificate of its --rest-tls-client-ca")


def record_view(r: ConfigRecord) -> dict:
    """An audit record as the endpoint shows it (without the config text it replaced)."""
    return {"id": r.id, "rmID": r.rm_id, "who": r.who, "time": r.at_ns, "action": r.action,
            "oldChecksum": r.old_checksum, "newChecksum": r.new_checksum, "note": r.note}


class AdminApi:
    def __init__(self, store: Registrations, changes: ConfigChanger, rms: Mapping[str, RMSession],
                 reader: ClusterReader, auth: AdminAuth) -> None:
        self.store = store
        self.changes = changes
        self.rms = rms  # the RMs this rmproxy holds: it applies their changes
        self.reader = reader
        self.auth = auth

    # ---------------------------------------------------------------- helpers
    async def _registration(self, rm_id: str):
        try:
            reg = await self.store.load(rm_id)
        except Exception as exc:
            raise ApiError(503, f"Redis unavailable: {exc}") from None
        if reg is None:
            known = ", ".join(self.reader.rm_ids()) or "none"
            raise ApiError(404, f"RM {rm_id!r} is not registered", f"registered RMs: {known}")
        return reg

    def _held_here(self, rm_id: str) -> None:
        if rm_id not in self.rms:
            holder = self.reader.broker.view.holder(rm_id) or "(unknown)"
            raise ApiError(421, f"RM {rm_id} is held by rmproxy {holder}, not this one",
                           "a config change is applied by the rmproxy holding the RM's session: send it there")

    async def _config_text(self, request: web.Request, rm_id: str) -> str:
        size = request.content_length
        raw = b"" if size == 0 else await request.read() if size is None or size <= MAX_CONFIG_BYTES else None
        if raw is None or len(raw) > MAX_CONFIG_BYTES:
            raise ApiError(413, f"config for RM {rm_id} is too large: {size or len(raw or b'')} bytes, "
                                f"the limit is {MAX_CONFIG_BYTES} bytes", "the active config is kept")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ApiError(400, f"config for RM {rm_id} is not UTF-8 text: {exc}", "the active config is kept") from None

    @staticmethod
    def _if_match(request: web.Request, rm_id: str) -> str:
        value = request.headers.get("If-Match", "").strip().strip('"')
        if not value:
            raise ApiError(428, f"a change of RM {rm_id}'s config needs the checksum it was made against",
                           "send If-Match: <checksum> (korral config get shows it); a concurrent change is then "
                           "refused instead of overwritten")
        return value

    @staticmethod
    def _allow_removal(request: web.Request) -> bool:
        value = request.query.get(ALLOW_REMOVAL_PARAM, "false").strip().lower()
        if value not in ("true", "false"):
            raise ApiError(400, f"parameter {ALLOW_REMOVAL_PARAM} must be true or false, got {value!r}",
                           "nothing changed")
        return value == "true"

    async def _checked(self, request: web.Request) -> tuple[str, str, str]:
        """(who, rmID, the checksum of If-Match) of a change, once the RM is known and held here."""
        who = self.auth.who(request)
        rm_id = request.match_info["rmID"]
        expected = self._if_match(request, rm_id)
        await self._registration(rm_id)
        self._held_here(rm_id)
        return who, rm_id, expected

    async def _change(self, who: str, rm_id: str, expected: str, text: str, action: str, note: str = "",
                      allow_removal: bool = False) -> dict:
        reg = await self._registration(rm_id)
        req = si_pb2.UpdateConfigurationRequest(rmID=rm_id, policyGroup=reg.policy_group, config=text,
                                                extraConfig=reg.extra_config)
        try:
            change = await self.changes.change(req, who, action, expected_checksum=expected, note=note,
                                               allow_partition_removal=allow_removal)
        except ConfigUpdateError as exc:
            raise ApiError(_HTTP_STATUS.get(exc.code, 500), str(exc), f"RM {rm_id}: the active config is kept") from None
        log.info("admin %s: %s of RM %s's config: %s -> %s%s", who, action, rm_id, change.old_checksum,
                 change.new_checksum, "" if change.changed else " (unchanged, nothing done)")
        return {"rmID": rm_id, "changed": change.changed, "oldChecksum": change.old_checksum,
                "newChecksum": change.new_checksum, "warning": change.warning,
                "record": record_view(change.record) if change.record is not None else None}

    # ---------------------------------------------------------------- handlers
    async def get(self, request: web.Request) -> web.Response:
        self.auth.who(request)
        rm_id = request.match_info["rmID"]
        reg = await self._registration(rm_id)
        # the text the scheduler serves: the default config's YAML when the RM's text is empty
        return json_response({"rmID": rm_id, "checksum": config_checksum(reg.config), "config": served_text(reg.config),
                              "default": not reg.config.strip(), "policyGroup": reg.policy_group,
                              "extraConfig": reg.extra_config})

    async def apply(self, request: web.Request) -> web.Response:
        who, rm_id, expected = await self._checked(request)  # before the body is read
        allow = self._allow_removal(request)
        text = await self._config_text(request, rm_id)
        return json_response(await self._change(who, rm_id, expected, text, "apply", allow_removal=allow))

    async def rollback(self, request: web.Request) -> web.Response:
        who, rm_id, expected = await self._checked(request)
        allow = self._allow_removal(request)
        try:
            number = int(request.match_info["id"])
        except ValueError:
            raise ApiError(400, f"change number must be an integer, got {request.match_info['id']!r}") from None
        records = await self._history(rm_id)
        record = next((r for r in records if r.id == number), None)
        if record is None:
            have = f"{records[0].id}..{records[-1].id}" if records else "none"
            raise ApiError(404, f"RM {rm_id} has no config change {number}", f"the history holds changes {have}")
        return json_response(await self._change(who, rm_id, expected, record.old_config, "rollback",
                                                f"restores the config change {number} replaced", allow))

    async def _history(self, rm_id: str) -> list[ConfigRecord]:
        try:
            records = await self.store.config_history(rm_id)
        except Exception as exc:
            raise ApiError(503, f"Redis unavailable: {exc}") from None
        if not records:
            await self._registration(rm_id)  # unknown RM: 404; else simply no change yet
        return records

    async def history(self, request: web.Request) -> web.Response:
        self.auth.who(request)
        rm_id = request.match_info["rmID"]
        return json_response({"rmID": rm_id, "records": [record_view(r) for r in await self._history(rm_id)]})

    async def dry_run(self, request: web.Request) -> web.Response:
        """What the config would do to the live partitions (``korral config apply --dry-run``)."""
        self.auth.who(request)
        rm_id = request.match_info["rmID"]
        reg = await self._registration(rm_id)
        text = await self._config_text(request, rm_id)
        try:
            config = load_config(text)
        except ConfigError as exc:
            raise ApiError(400, f"config for RM {rm_id} is not valid: {exc}", "nothing changed") from None
        live = [t for t in self.reader.targets() if t.rm_id == rm_id]
        answers = await asyncio.gather(*(self.reader.query(t, WhatIfQuery(config=text)) for t in live),
                                       return_exceptions=True)
        partitions = []
        removed: dict[str, dict | str] = {}  # what each partition the config leaves out holds
        names = {p.name for p in config.partitions}
        for t, a in zip(live, answers):
            if isinstance(a, BaseException):
                partitions.append({"partition": t.partition, "error": getattr(a, "message", str(a))})
            else:
                partitions.append({"partition": t.partition, **a})
            if t.partition not in names:
                removed[t.partition] = a if isinstance(a, dict) else getattr(a, "message", str(a))
        idle = sum(1 for w in self.reader.broker.cluster().get("workers", []) if not w.get("partition"))
        for p in config.partitions:
            if p.name not in {t.partition for t in live}:
                partitions.append({"partition": p.name, "action": "add",
                                   "note": f"a new partition: an idle worker takes it ({idle} idle now)"})
        unchanged = config_checksum(text) == config_checksum(reg.config)
        return json_response({"rmID": rm_id, "oldChecksum": config_checksum(reg.config),
                              "newChecksum": config_checksum(text), "unchanged": unchanged,
                              "refusal": "" if unchanged else removal_refusal(rm_id, text, removed),
                              "warnings": list(config.warnings), "partitions": partitions})
