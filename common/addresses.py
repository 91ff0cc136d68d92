"""Every address a process binds or connects to: flag, environment variable, default.

One table, so ``korral up``, the processes and the docs agree.
"""

from __future__ import annotations

import argparse
import os

__all__ = ["DEFAULTS", "default", "add_flag", "add_log_level", "setup_logging"]

DEFAULTS = {
    "si_address": ("KORRAL_SI_ADDRESS", "127.0.0.1:9090"),
    "rest_address": ("KORRAL_REST_ADDRESS", "127.0.0.1:9080"),
    "broker_frontend": ("KORRAL_BROKER_FRONTEND", "tcp://127.0.0.1:5555"),
    "broker_backend": ("KORRAL_BROKER_BACKEND", "tcp://127.0.0.1:5556"),
    "redis_url": ("KORRAL_REDIS_URL", "redis://127.0.0.1:6379/0"),
}


def default(name: str) -> str:
    env, value = DEFAULTS[name]
    return os.environ.get(env, value)


def add_flag(parser: argparse.ArgumentParser, flag: str, name: str, help_text: str) -> None:
    env, value = DEFAULTS[name]
    parser.add_argument(flag, dest=name, default=default(name),
                        help=f"{help_text} [${env}, default {value}]")


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default=os.environ.get("KORRAL_LOG_LEVEL", "INFO"),
                        help="log level: DEBUG, INFO, WARNING, ERROR [$KORRAL_LOG_LEVEL, default INFO]")


def setup_logging(level: str, role: str) -> None:
    import logging

    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s {role}[%(process)d] %(name)s: %(message)s",
    )
