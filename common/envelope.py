"""The one envelope format for everything that crosses ZeroMQ.

An envelope is a msgpack array ``[version, kind, rm_id, partition, epoch, seq, body]``.
``body`` is any msgpack value; SI traffic carries the serialized protobuf of a
per-partition request or response (bytes), so a 10,000-ask request crosses as
one envelope per partition, and neither side converts protobuf to dicts. Every
other kind's body is a map described by its class in ``common.messages`` (which
also holds ``Kind`` and ``EnvelopeError``, re-exported here); ``decode_typed`` and
``decode_for`` give the body as that class.

Decoding never raises anything but ``EnvelopeError``; callers log, count and
drop those, so a malformed frame (or a malformed body) never crashes a process.

A router needs only the header: ``decode_header`` reads the six header fields (and the
body's request ``id`` when the body is a map), leaves the body undecoded and keeps the
frame, so a 42 MB answer is forwarded as received, not decoded and re-encoded. It checks
the header exactly as ``decode`` does; a frame whose header is valid but whose body is not
is forwarded, and the receiver's ``decode`` drops it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Mapping

import msgpack

from common.messages import BODIES, KINDS, EnvelopeError, Kind

__all__ = ["VERSION", "Kind", "EnvelopeError", "Envelope", "RawEnvelope", "encode", "decode", "decode_typed",
           "decode_header", "decode_for", "dispatch"]

log = logging.getLogger("korral.envelope")

VERSION = 2  # 2: the allocation stream carries rows (common.si_rows)


@dataclass(frozen=True, slots=True)
class Envelope:
    kind: Kind
    rm_id: str = ""
    partition: str = ""
    epoch: int = 0
    seq: int = 0
    body: Any = None

    def reply(self, kind: Kind, body: Any = None) -> "Envelope":
        """An envelope about the same (rm_id, partition, epoch, seq)."""
        return Envelope(kind, self.rm_id, self.partition, self.epoch, self.seq, body)

    @property
    def request_id(self) -> int | None:
        """The body's integer ``"id"`` (queries, config updates and their answers), else None."""
        body = self.body
        qid = body.get("id") if isinstance(body, dict) else getattr(body, "id", None)
        return qid if type(qid) is int else None

    def decoded(self) -> "Envelope":
        return self


@dataclass(frozen=True, slots=True)
class RawEnvelope:
    """An envelope whose body was not decoded (``decode_header``): the header fields, the
    body's request id, and ``frame``, the frame exactly as received (bytes, memoryview or a
    ZeroMQ frame), to forward unchanged."""

    kind: Kind
    rm_id: str
    partition: str
    epoch: int
    seq: int
    frame: Any
    request_id: int | None = None

    def decoded(self) -> Envelope:
        """The whole envelope, body included; EnvelopeError if the body is not msgpack."""
        return decode(self.frame)


def encode(env: Envelope) -> bytes:
    """Encode; a malformed envelope is a bug of the sender, so it raises here, not at the receiver."""
    if type(env.epoch) is not int or type(env.seq) is not int or env.epoch < 0 or env.seq < 0:
        raise TypeError(f"envelope {env.kind} needs non-negative int epoch and seq, "
                        f"got {env.epoch!r}, {env.seq!r}")
    return msgpack.packb(
        [VERSION, env.kind.value, env.rm_id, env.partition, env.epoch, env.seq, env.body],
        use_bin_type=True,
    )


def decode(raw: Any) -> Envelope:
    """Decode one frame (any bytes-like object); raise EnvelopeError for anything that is not
    a valid envelope."""
    try:
        fields = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several types; all mean "not an envelope"
        raise EnvelopeError(f"not msgpack: {exc}", raw) from None
    if not isinstance(fields, list) or len(fields) != 7:
        raise EnvelopeError("expected a 7-element array", raw)
    k = _checked_header(fields[:6], raw)
    return Envelope(k, fields[2], fields[3], fields[4], fields[5], fields[6])


def decode_typed(raw: Any) -> Envelope:
    """``decode``, with a control kind's body as its ``common.messages`` class; EnvelopeError
    (holding ``raw``) for a bad frame or a bad body."""
    env = decode(raw)
    cls = BODIES.get(env.kind)
    return env if cls is None else replace(env, body=cls.decode(env.body, raw))


# Bytes read first by decode_header: the header and a body's leading "id" fit easily; a longer
# header (or an "id" behind a large value) makes it read the whole frame instead.
_PEEK = 4096
_MAP_MARKERS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}  # fixmap, map 16, map 32


def decode_header(raw: Any) -> RawEnvelope:
    """Decode the header of one frame, not its body (see the module doc); raise EnvelopeError
    for a frame whose header ``decode`` would reject, that has no body at all, or whose body is
    a map that cannot be read as far as its "id"."""
    view = memoryview(raw)
    try:
        try:
            return _header(view, view[:_PEEK], raw)
        except msgpack.OutOfData:
            if len(view) <= _PEEK:
                raise
            return _header(view, view, raw)
    except EnvelopeError:
        raise
    except msgpack.OutOfData:
        raise EnvelopeError("not msgpack: truncated", raw) from None
    except Exception as exc:  # msgpack raises several types; all mean "not an envelope"
        raise EnvelopeError(f"not msgpack: {exc}", raw) from None


def _header(view: memoryview, head: memoryview, raw: Any) -> RawEnvelope:
    # limits from the whole frame's size: a large body is skipped by length, never refused
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(view), 1),
                                read_size=max(len(head), 1))  # its buffer: the peek, not 1 MiB
    unpacker.feed(head)
    try:
        size = unpacker.read_array_header()
    except ValueError:  # not an array at all
        raise EnvelopeError("expected a 7-element array", raw) from None
    if size != 7:
        raise EnvelopeError("expected a 7-element array", raw)
    fields = [unpacker.unpack() for _ in range(6)]
    kind = _checked_header(fields, raw)
    body_at = unpacker.tell()
    if body_at >= len(view):
        raise EnvelopeError("expected a 7-element array (the body is missing)", raw)
    qid = None
    if view[body_at] in _MAP_MARKERS:
        qid = _request_id(unpacker, view, body_at)
    return RawEnvelope(kind, fields[2], fields[3], fields[4], fields[5], raw, qid)


def _request_id(unpacker: msgpack.Unpacker, view: memoryview, body_at: int) -> int | None:
    """The integer value of the body map's "id" key; values before it are skipped, not built."""
    try:
        return _find_id(unpacker)
    except msgpack.OutOfData:  # "id" lies behind a value longer than the peek: read the body
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(view), 1),
                                    read_size=max(len(view) - body_at, 1))
        unpacker.feed(view[body_at:])
        return _find_id(unpacker)


def _find_id(unpacker: msgpack.Unpacker) -> int | None:
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key == "id":
            qid = unpacker.unpack()
            return qid if type(qid) is int else None
        unpacker.skip()
    return None


def _checked_header(fields: list, raw: Any) -> Kind:
    """The Kind of a valid header ``[version, kind, rm_id, partition, epoch, seq]``."""
    version, kind, rm_id, partition, epoch, seq = fields
    if version != VERSION:
        raise EnvelopeError(f"unsupported version {version!r} (this build speaks {VERSION})", raw)
    k = KINDS.get(kind) if isinstance(kind, str) else None
    if k is None:
        raise EnvelopeError(f"unknown kind {kind!r}", raw)
    if not isinstance(rm_id, str) or not isinstance(partition, str):
        raise EnvelopeError("rm_id and partition must be strings", raw)
    if not isinstance(epoch, int) or not isinstance(seq, int) or epoch < 0 or seq < 0:
        raise EnvelopeError("epoch and seq must be non-negative integers", raw)
    return k


def decode_for(raw: bytes, handlers: Mapping[Kind, Any], receiver: str) -> tuple[Envelope, Any] | None:
    """Decode a frame (``decode_typed``) and find its handler in ``handlers``; a bad frame or
    body, or a kind the receiver does not take, is logged and gives None (the caller counts it
    as dropped)."""
    try:
        env = decode_typed(raw)
    except EnvelopeError as exc:
        log.warning("%s dropped a frame: %s", receiver, exc)
        return None
    handler = handlers.get(env.kind)
    if handler is None:
        log.warning("%s dropped %s: not a message for it", receiver, env.kind.value)
        return None
    return env, handler


def dispatch(owner: Any, raw: bytes, handlers: Mapping[Kind, Any], receiver: str) -> bool:
    """``decode_for``, then the handler it found: ``handler(owner, env)``. False when the frame
    was dropped (the caller counts it)."""
    got = decode_for(raw, handlers, receiver)
    if got is None:
        return False
    env, handler = got
    handler(owner, env)
    return True
