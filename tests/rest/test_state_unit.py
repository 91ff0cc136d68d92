"""Pieces of the state dump that need no stack: the RM's own dump, JSON layout, node views."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from rmproxy.rms import RMSession
from rmproxy.webapi.config import config_with_checksum
from rmproxy.webapi.state import RawJSON, StateApi, pretty_dump


async def rm_dumps(held: SimpleNamespace, answering: set[str]) -> dict:
    """``_rm_state_dumps`` of the RMs ``held``, whose RMs in ``answering`` reply to the request as
    rmproxy's ProvideStateDump handler stores a reply; the others never do."""

    async def answer(rm: RMSession) -> None:
        notice = await rm.subscribers[0].get()
        held.state_dumps[rm.rm_id] = {"requestID": notice.stateDumpRequest.requestID, "json": '{"pods": 3}'}

    replies = [asyncio.create_task(answer(held.rms[rm_id])) for rm_id in answering]
    try:
        return await StateApi(held, store=None, reader=None, stack_view=None, history=None)._rm_state_dumps()
    finally:
        for task in replies:
            task.cancel()


def subscribed_rms(*rm_ids: str) -> dict[str, RMSession]:
    return {rm_id: RMSession(rm_id, ["default"], subscribers=[asyncio.Queue()]) for rm_id in rm_ids}


def test_rm_state_dumps_are_requested_and_collected(monkeypatch) -> None:
    import rmproxy.webapi.state as state

    monkeypatch.setattr(state, "RM_DUMP_WAIT", 0.5)
    held = SimpleNamespace(state_dumps={}, rms=subscribed_rms("rm-a", "rm-b"))
    got = asyncio.run(rm_dumps(held, {"rm-a"}))
    assert got == {"rm-a": {"pods": 3}}  # rm-b did not answer in time: left out
    assert held.rms["rm-b"].subscribers[0].get_nowait().stateDumpRequest.requestID.startswith("dump-")


def test_without_a_subscribed_rm_no_rm_is_asked() -> None:
    held = SimpleNamespace(state_dumps={}, rms={"rm-a": RMSession("rm-a", ["default"])})
    assert asyncio.run(rm_dumps(held, set())) == {}


def test_pretty_dump_is_json_with_one_element_per_line() -> None:
    doc = {"Timestamp": 1, "Partitions": [{"name": "a"}, {"name": "b"}], "Applications": [], "LogLevel": "INFO"}
    text = pretty_dump(doc)
    assert json.loads(text) == doc
    assert b'\n    {"name":"b"}\n' in text


def test_pre_encoded_json_is_spliced_as_it_is() -> None:
    doc = {"Applications": [RawJSON('{"applicationID":"a1"}'), {"applicationID": "a2"}], "LogLevel": "INFO"}
    assert json.loads(pretty_dump(doc)) == {"Applications": [{"applicationID": "a1"}, {"applicationID": "a2"}],
                                            "LogLevel": "INFO"}


def _str_pretty_dump(doc: dict) -> str:
    """The layout as it was built before the dump became bytes (str pieces joined per level)."""
    enc = json.JSONEncoder(separators=(",", ":")).encode
    parts = []
    for key, value in doc.items():
        if isinstance(value, list) and value:
            body = ",\n    ".join(b"".join(v.parts).decode() if isinstance(v, RawJSON) else enc(v) for v in value)
            parts.append(f"  {enc(key)}: [\n    {body}\n  ]")
        else:
            parts.append(f"  {enc(key)}: {enc(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def test_bytes_dump_is_byte_for_byte_the_former_text_layout() -> None:
    import orjson

    node = {"nodeID": "n\u00e9", "attributes": {"k": "\u2603"}, "allocations": [{"uuid": "u1"}]}
    doc = {"Timestamp": 1, "Partitions": [{"name": "d\u00e9faut"}],
           "Applications": [RawJSON(orjson.dumps({"applicationID": "a\u00ef"})), {"applicationID": "a2"}],
           "Nodes": [RawJSON(b'{"partitionName":', '"default"', b',"nodesInfo":[',
                             *[orjson.dumps(node), b",", orjson.dumps(node)], b"]}")],
           "Empty": [], "RMDiagnostics": {"rm": {"config": "queues: \u00e9"}}, "LogLevel": "INFO"}
    got = pretty_dump(doc)
    assert isinstance(got, bytes)
    assert got == _str_pretty_dump(doc).encode("utf-8")  # what web.Response(text=...) sent before
    assert json.loads(got)["Nodes"][0]["nodesInfo"][1]["attributes"] == {"k": "\u2603"}


def test_config_checksum_line_is_replaced_not_duplicated() -> None:
    text = config_with_checksum("partitions:\n  - name: default\nchecksum: ABC\n")
    assert text.count("checksum:") == 1 and len(text.split("checksum: ")[1].strip()) == 64
    assert config_with_checksum(text) == text


def test_partitions_of_another_rmproxys_rm_are_not_queried_until_the_broker_routes_replies() -> None:
    from rmproxy.cluster_view import ClusterView
    from rmproxy.webapi._http import ApiError
    from rmproxy.webapi.cluster import ClusterReader, Target

    from common.messages import PartitionQuery
    from rmproxy.worker_requests import WorkerRequests

    sent = []
    view = ClusterView()
    view.on_status({"rmproxies": [{"name": "proxy-b", "rms": {"rm-x": {"state": "Running"}}}]})  # an old broker
    broker = SimpleNamespace(connected=True, view=view, requests=WorkerRequests(sent.append))
    reader = ClusterReader(broker, rms={})
    try:
        asyncio.run(reader.query(Target("rm-x", "default", 3), PartitionQuery()))
    except ApiError as exc:
        assert exc.status == 503 and "served by rmproxy proxy-b" in exc.message
    else:
        raise AssertionError("a query for another rmproxy's RM was sent")
    assert sent == []


def test_resync_observer_counts_and_times_until_re_registration() -> None:
    from rmproxy.webapi.korral import ResyncObserver

    obs = ResyncObserver()
    obs.resync_started("rm-1", "partition default has a new owner (epoch 2)")
    assert obs.count == 1 and obs.history[-1]["durationSeconds"] is None
    obs.registered("rm-1")
    assert obs.history[-1]["durationSeconds"] is not None and obs.seconds >= 0 and not obs.started
    obs.registered("rm-2")  # a first registration is no resync
    assert obs.count == 1 and len(obs.history) == 1


def test_the_dump_is_written_in_pieces_that_add_up_to_the_document() -> None:
    from rmproxy.webapi.state import _chunks

    parts = [b"a" * 700, b"b" * 10, b"c" * 3000, b"", b"d" * 5]
    pieces = list(_chunks(parts, 1000))
    assert b"".join(pieces) == b"".join(parts)
    assert [len(p) for p in pieces] == [3710, 5]  # each piece at least the size, but the last
    assert list(_chunks([], 1000)) == []
