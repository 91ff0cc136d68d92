"""The active config and config validation.

- ``GET /ws/v1/config``: the RM's queues.yaml as registered (the default config when it sent
  none) with YuniKorn's ``checksum:`` line; JSON when the client accepts JSON.
- ``POST /ws/v1/validate-conf``: ``{"allowed", "reason", "checksum", "checksumMatch"}`` from the
  same loader the workers use: ``checksum`` is what ``/ws/v1/config`` would show once the text is
  applied (``config_checksum``), ``checksumMatch`` whether the text's own ``checksum:`` line says
  the same (a file saved from ``/ws/v1/config`` and not edited since); both empty (``""``,
  ``false``) for a refused config (YuniKorn leaves them out then).
"""

from __future__ import annotations

import yaml
from aiohttp import web

from common.config import config_checksum, load_config
from common.config.errors import ConfigError
from common.config.loader import config_with_checksum, file_checksum
from rmproxy.webapi._http import ALLOW_ORIGIN, ApiError, json_response
from rmproxy.webapi.cluster import ClusterReader
from rmproxy.webapi.seams import Registrations

__all__ = ["ConfigApi", "config_with_checksum", "config_json"]


def config_json(reg) -> dict:
    """An RM's active config as JSON (``/ws/v1/config`` with ``Accept: application/json``, and the
    state dump's ``config``): the queues.yaml document, its ``checksum``, ``extraConfig``, ``rmID``."""
    doc = yaml.safe_load(config_with_checksum(reg.config)) or {}
    return doc | {"extraConfig": reg.extra_config, "rmID": reg.rm_id}


class ConfigApi:
    def __init__(self, store: Registrations, reader: ClusterReader) -> None:
        self.store = store
        self.reader = reader

    async def config(self, request: web.Request) -> web.Response:
        """The active config of ``?rmID=`` (default: the first RM by rmID)."""
        rm_ids = self.reader.rm_ids()
        rm_id = request.query.get("rmID") or (rm_ids[0] if rm_ids else None)
        if rm_id is None:
            raise ApiError(404, "no RM is registered", "the config is the RM's; register an RM first")
        try:
            reg = await self.store.load(rm_id)
        except Exception as exc:
            raise ApiError(503, f"Redis unavailable: {exc}") from None
        if reg is None:
            raise ApiError(404, f"RM {rm_id!r} is not registered")
        if "application/json" in request.headers.get("Accept", ""):
            return json_response(config_json(reg))
        return web.Response(text=config_with_checksum(reg.config), content_type="application/x-yaml",
                            charset="UTF-8", headers=ALLOW_ORIGIN)

    async def validate(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            cfg = load_config(raw)
        except ConfigError as exc:
            return json_response({"allowed": False, "reason": str(exc), "checksum": "", "checksumMatch": False})
        text = raw.decode("utf-8")  # the loader took it, so it is UTF-8
        checksum = config_checksum(text)
        own = file_checksum(text)
        return json_response({"allowed": True, "reason": "; ".join(cfg.warnings), "checksum": checksum,
                              "checksumMatch": own is not None and own.upper() == checksum})
