"""``korral check-config FILE``: validate a queues.yaml offline (YuniKorn's queueconfigchecker).

Prints every error (``error: ...``) and warning (``warning: ...``). Exit status:
0 valid, 1 invalid (or, with ``--strict``, valid with warnings), 2 the file
cannot be read. ``-`` reads standard input, named ``<stdin>`` in the output.
Errors in the YAML text itself start with the file name and give the line.

The checksum printed is the one the scheduler would show for this file once applied
(``config_checksum``: what ``/ws/v1/config`` serves for it); a ``checksum:`` line in the file (a
file saved by ``korral config get``) is not part of the config: the summary says it was ignored,
and whether it matches.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from common.config.errors import ConfigError
from common.config.loader import MAX_CONFIG_BYTES, file_checksum, load_config
from common.config.model import QueueConfig

__all__ = ["configure", "run", "check_text"]

EXIT_VALID, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="queues.yaml to validate, or - for standard input")
    parser.add_argument("--strict", action="store_true", help="treat warnings as errors (exit 1)")
    parser.add_argument("--quiet", "-q", action="store_true", help="print errors only, no summary or warnings")


def run(args: argparse.Namespace) -> int:
    name = "<stdin>" if args.file == "-" else args.file
    try:
        data, size = _read(args.file)
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if size > MAX_CONFIG_BYTES:
        print(f"error: config too large: {size} bytes, the limit is {MAX_CONFIG_BYTES} bytes")
        print(f"{name}: invalid, 1 error(s)")
        return EXIT_INVALID
    return check_text(data, name, strict=args.strict, quiet=args.quiet, out=sys.stdout)


def check_text(text: str | bytes, name: str = "<config>", *, strict: bool = False, quiet: bool = False, out: TextIO = sys.stdout) -> int:
    """Validate ``text`` and report on ``out``; returns the exit status."""
    try:
        config = load_config(text, source=name)
    except ConfigError as exc:
        for message in exc.errors:
            print(f"error: {message}", file=out)
        print(f"{name}: invalid, {len(exc.errors)} error(s)", file=out)
        return EXIT_INVALID
    if not quiet:
        for message in config.warnings:
            print(f"warning: {message}", file=out)
        empty = not text.strip()
        print(f"{name}: valid{' (empty: the default config)' if empty else ''}", file=out)
        for p in config.partitions:
            print(
                f"  partition {p.name}: {_count(p.root)} queues, {len(p.placementrules)} placement rules, "
                f"node sort {p.nodesortpolicy.type}"
                + (f", topology {' > '.join(lv.name for lv in p.topology.levels)}" if p.topology.levels else ""),
                file=out,
            )
        print(f"  checksum {config.checksum}", file=out)
        own = file_checksum(text if isinstance(text, str) else text.decode("utf-8"))
        if own is not None:
            same = "it matches" if own.upper() == config.checksum else "it differs"
            print(f"  the file's own checksum: line ({own}) was ignored: it is not part of the config ({same}); "
                  "the checksum above is what the scheduler would show for this file", file=out)
    if strict and config.warnings:
        if quiet:
            for message in config.warnings:
                print(f"error: {message}", file=out)
        return EXIT_INVALID
    return EXIT_VALID


def _count(queue: QueueConfig) -> int:
    return 1 + sum(_count(q) for q in queue.queues)


def _read(path: str) -> tuple[bytes, int]:
    """The text (at most one byte more than the limit, so a huge file is never held whole) and
    the input's size in bytes (standard input beyond the limit is read to its end and counted)."""
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        data = stream.read(MAX_CONFIG_BYTES + 1)
        size = len(data)
        while len(data) > MAX_CONFIG_BYTES and (chunk := stream.read(1 << 20)):
            size += len(chunk)
        return data, size
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
