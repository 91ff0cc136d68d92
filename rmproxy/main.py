"""The rmproxy process: gRPC SI front door, REST API, and the link to the broker, on one asyncio loop."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

import grpc
from aiohttp import web

from common import addresses, korral_pb2_grpc, registry, security
from common.webui import check_ui_dir
from rmproxy.proxy import Proxy
from rmproxy.service import KorralService, SchedulerService
from rmproxy.webapi import build_app
from rmproxy.webapi.admin import AdminAuth

__all__ = ["MAX_MESSAGE_BYTES", "configure", "serve", "run"]

log = logging.getLogger("korral.rmproxy")

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # a 100,000-node NodeRequest is tens of MB


def configure(parser: argparse.ArgumentParser) -> None:
    addresses.add_flag(parser, "--si-address", "si_address", "gRPC address for RMs (host:port)")
    addresses.add_flag(parser, "--rest-address", "rest_address", "REST address (host:port)")
    addresses.add_flag(parser, "--broker", "broker_frontend", "broker frontend address to connect to")
    addresses.add_flag(parser, "--redis-url", "redis_url", "Redis URL (RM registrations)")
    parser.add_argument("--name", default=os.environ.get("KORRAL_RMPROXY_NAME", ""),
                        help="rmproxy name shown in status [$KORRAL_RMPROXY_NAME, default <host>-<pid>]")
    parser.add_argument("--rm-timeout", type=float, default=os.environ.get("KORRAL_RM_TIMEOUT", "300"),
                        help="seconds an RM may stay Paused (all its streams closed) before it is Stopped "
                             "and its partitions released [$KORRAL_RM_TIMEOUT, default 300]")
    parser.add_argument("--hold-seconds", type=float, default=os.environ.get("KORRAL_HOLD_SECONDS", "30"),
                        help="how long a request for a partition without a worker is held before it is "
                             "answered with an error [$KORRAL_HOLD_SECONDS, default 30]")
    parser.add_argument("--trends-interval", type=float, default=os.environ.get("KORRAL_TRENDS_INTERVAL", "10"),
                        help="seconds between the samples of the dashboard's charts (the last hour is kept) "
                             "[$KORRAL_TRENDS_INTERVAL, default 10]")
    parser.add_argument("--ui-dir", default=os.environ.get("KORRAL_UI_DIR", ""),
                        help="serve the web UI in this directory (its index.html and files, e.g. YuniKorn's "
                             "web UI as built) at / on the REST address, and Korral's dashboard at /ui/ "
                             "[$KORRAL_UI_DIR, default Korral's dashboard at /]")
    security.add_curve_client_flags(parser)
    security.add_tls_flags(parser)
    security.add_rest_tls_flags(parser)
    addresses.add_log_level(parser)


async def serve(args: argparse.Namespace) -> None:
    try:
        ui_dir = check_ui_dir(args.ui_dir) if args.ui_dir else None
    except ValueError as exc:
        raise SystemExit(f"rmproxy: {exc}") from None
    proxy = Proxy(args.broker_frontend, registry.AsyncRegistryStore(registry.connect_async(args.redis_url)),
                  name=args.name, rm_timeout=args.rm_timeout, curve=(args.curve_secret, args.curve_server),
                  hold_seconds=args.hold_seconds)
    security.client_keys(*proxy.broker.curve)  # fail fast on bad key files, before serving anything
    credentials = security.grpc_server_credentials(args.tls_cert, args.tls_key, args.tls_client_ca)
    rest_ssl = security.rest_server_ssl(args.rest_tls_cert, args.rest_tls_key, args.rest_tls_client_ca)
    admin = AdminAuth(args.admin_token_file, client_certs=bool(args.rest_tls_client_ca))
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ])
    server.add_generic_rpc_handlers((SchedulerService(proxy.registry, proxy.router, proxy.config_changes).handler(),))
    korral_pb2_grpc.add_KorralServicer_to_server(KorralService(proxy.registry, proxy.config_changes), server)
    port = (server.add_secure_port(args.si_address, credentials) if credentials is not None
            else server.add_insecure_port(args.si_address))
    if port == 0:
        raise SystemExit(f"rmproxy: cannot listen on SI address {args.si_address}")
    await server.start()
    if not args.trends_interval > 0:
        raise SystemExit(f"korral rmproxy: --trends-interval must be positive, got {args.trends_interval:g}")
    runner = web.AppRunner(build_app(proxy, admin, args.trends_interval, ui_dir), access_log=None)
    await runner.setup()
    host, _, port = args.rest_address.rpartition(":")
    site = web.TCPSite(runner, host or "0.0.0.0", int(port), ssl_context=rest_ssl)
    try:
        await site.start()
    except OSError as exc:
        raise SystemExit(f"rmproxy: cannot listen on REST address {args.rest_address}: {exc}") from None
    running = asyncio.create_task(proxy.run())
    log.info("rmproxy serving SI on %s, REST on %s://%s (admin endpoint: %s), broker %s", args.si_address,
             "https" if rest_ssl else "http", args.rest_address, admin.describe(), args.broker_frontend)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    running.cancel()
    await server.stop(1.0)
    await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    addresses.setup_logging(args.log_level, "rmproxy")
    try:
        asyncio.run(serve(args))
    except security.SecurityError as exc:
        raise SystemExit(f"korral rmproxy: {exc}") from None
    return 0
