"""`korral status` from any host: through an rmproxy (--rest-address) or the broker (--broker)."""

from __future__ import annotations

import json

from tests.conftest import run_korral, wait_until
from tests.e2e.sirm import SIRM
from tests.si_builders import node


def _status(*args: str) -> dict:
    r = run_korral("status", *args, "--json")
    return json.loads(r.stdout)


def _rms(doc: dict) -> dict[str, dict]:
    return {rm_id: info for p in doc.get("rmproxies", []) for rm_id, info in p["rms"].items()}


def _status_naming(rm_id: str, *args: str) -> dict | None:
    """The status once it shows ``rm_id`` as its rmproxy reported it (None before): right after a
    registration the broker knows the RM's state and partitions, and its compatibility switch
    only from the rmproxy's next heartbeat."""
    doc = _status(*args)
    return doc if "compatibility" in _rms(doc).get(rm_id, {}) else None


def test_status_shows_workers_partitions_and_rms_from_any_entry_point(stack):
    with SIRM(stack.si_address, "rm-status") as rm:
        rm.start(node("n1", memory=10))
        for args in (("--rest-address", stack.rest_address), ("--broker", stack.broker_frontend)):
            doc = wait_until(lambda: _status_naming("rm-status", *args), 10,
                             f"rm-status in the status through {args[0]}", interval=0.3)
            rms = _rms(doc)
            assert doc["broker"] is True
            owners = [w for w in doc["workers"] if w["partition"] == "rm-status/default"]
            assert len(owners) == 1 and owners[0]["epoch"] >= 1 and owners[0]["heartbeatAge"] < 3
            assert len(doc["workers"]) == 2  # one owner, one spare
            shown = rms["rm-status"]
            assert {k: shown[k] for k in ("state", "partitions")} == {"state": "Running", "partitions": ["default"]}
            # no message only one SI revision has yet: the seeds' switch, saying why
            assert {k: shown["compatibility"][k] for k in ("version", "source")} == {"version": "1.2",
                                                                                     "source": "default"}
            assert {"rmID": "rm-status", "partition": "default", "worker": owners[0]["name"],
                    "epoch": owners[0]["epoch"], "loaded": True, "lastEpoch": owners[0]["epoch"],
                    "state": "owned"} in doc["partitions"]


def test_status_of_an_unreachable_broker_is_a_clear_error():
    r = run_korral("status", "--broker", "tcp://127.0.0.1:1")
    assert r.returncode == 1 and "did not answer" in r.stderr


def test_an_rm_that_shut_down_leaves_the_status_at_once(stack):
    """The broker's view reaches rmproxy a heartbeat later; an RM this rmproxy just stopped must
    not show as Running, nor its partitions as owned, in the meantime."""
    def rms_and_partitions() -> tuple[set, set, set]:
        doc = _status("--rest-address", stack.rest_address)
        rms = set(_rms(doc))
        owned = {w["partition"] for w in doc["workers"] if w["partition"]}
        return rms, {p["rmID"] for p in doc["partitions"]}, owned

    with SIRM(stack.si_address, "rm-bye") as rm:
        rm.start(node("n1", memory=10))
        wait_until(lambda: _status_naming("rm-bye", "--rest-address", stack.rest_address), 10,
                   "the RM in the status", interval=0.2)
        rm.shutdown()
        rms, partitions, owned = rms_and_partitions()
        assert "rm-bye" not in rms and "rm-bye" not in partitions and "rm-bye/default" not in owned
