"""Hot reload of YuniKorn's configmaps (``k8s_shim.reloader``) with Korral's
``UpdateConfiguration`` replaced by a recorder: a change is sent, an unchanged one is not, the
non-reloadable settings keep their running value with a ``ConfigKept`` event, a configmap that
cannot be read or a config Korral refuses keeps the previous one with a ``ConfigRejected`` event,
``service.enableConfigHotRefresh: false`` stops reloads, and Korral out of reach is retried."""

from __future__ import annotations

import asyncio
import base64

import grpc

from si_client import SchedulerError
from k8s_shim import reloader as reloader_module
from k8s_shim.writes.events import EventRecorder
from k8s_shim.reloader import Reloader
from tests.conftest import wait_until_async


class FakeAPI:
    def __init__(self, *answers) -> None:
        self.answers = list(answers)  # None: accepted; an exception: raised
        self.requests = []

    async def update_configuration_async(self, request):
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer


def cm(name: str, **data: str) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "data": data}


def reasons(events: EventRecorder) -> list[tuple[str, str]]:
    out = []
    while events.queue:
        _, e = events.queue.popleft()
        out.append((e["reason"], e["note"]))
    return out


async def started(*configmaps: dict, api: FakeAPI) -> tuple[Reloader, EventRecorder]:
    events = EventRecorder(None, "yunikorn", "test")
    r = Reloader("yunikorn", events)
    for c in configmaps:
        r.changed(None, r.decode(c, None))
    r.initial()
    r.api = api
    return r, events


def change(r: Reloader, new: dict) -> None:
    name = new["metadata"]["name"]
    r.changed(r.configmaps.get(name), r.decode(new, None))


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))


def test_a_change_is_sent_and_an_unchanged_one_is_not():
    async def main():
        api = FakeAPI()
        r, events = await started(cm("yunikorn-configs", **{"queues.yaml": "a: 1"}), api=api)
        change(r, cm("yunikorn-configs", **{"queues.yaml": "a: 2", "log.level": "DEBUG"}))
        await wait_until_async(lambda: r.reloads == 1, 5, "the reload")
        [req] = api.requests
        assert (req.rmID, req.policyGroup, req.config) == ("mycluster", "queues", "a: 2")
        assert dict(req.extraConfig) == {"log.level": "DEBUG"}
        change(r, cm("yunikorn-defaults", other="x.yaml-is-not-this"))  # a new extra key: sent
        await wait_until_async(lambda: r.reloads == 2, 5, "the second reload")
        change(r, cm("yunikorn-defaults", other="x.yaml-is-not-this"))  # nothing changed: not sent
        await asyncio.sleep(0.05)
        assert len(api.requests) == 2 and not reasons(events)
    run(main())


def test_non_reloadable_settings_keep_their_running_value_with_an_event():
    async def main():
        api = FakeAPI()
        r, events = await started(cm("yunikorn-configs", **{"service.clusterId": "c1", "queues.yaml": "a"}), api=api)
        change(r, cm("yunikorn-configs", **{"service.clusterId": "c2", "queues.yaml": "b"}))
        await wait_until_async(lambda: r.reloads == 1, 5, "the reload")
        assert api.requests[0].rmID == "c1" and r.loaded.conf.cluster_id == "c1"
        [(reason, note)] = reasons(events)
        assert reason == "ConfigKept" and "service.clusterId changed from 'c1' to 'c2'" in note
    run(main())


def test_an_unreadable_configmap_keeps_the_previous_config_and_says_why():
    async def main():
        api = FakeAPI()
        r, events = await started(cm("yunikorn-configs", **{"queues.yaml": "a"}), api=api)
        change(r, cm("yunikorn-configs", **{"queues.yaml": "b", "service.schedulingInterval": "soon"}))
        await wait_until_async(lambda: r.refusals == 1, 5, "the refusal")
        assert not api.requests and r.loaded.queues == "a"
        [(reason, note)] = reasons(events)
        assert reason == "ConfigRejected" and "service.schedulingInterval: 'soon' is not a duration" in note
        bad_gzip = {"metadata": {"name": "yunikorn-configs"}, "binaryData": {
            "queues.yaml.gz": base64.b64encode(b"no gzip").decode()}}
        change(r, bad_gzip)
        await wait_until_async(lambda: r.refusals == 2, 5, "the second refusal")
        assert "is not gzip data" in reasons(events)[0][1]
    run(main())


def test_a_config_korral_refuses_is_not_sent_again_until_it_changes():
    async def main():
        refused = SchedulerError("UpdateConfiguration", grpc.StatusCode.INVALID_ARGUMENT, "queue root.x: bad max")
        api = FakeAPI(refused)
        r, events = await started(cm("yunikorn-configs", **{"queues.yaml": "good"}), api=api)
        change(r, cm("yunikorn-configs", **{"queues.yaml": "bad"}))
        await wait_until_async(lambda: r.refusals == 1, 5, "the refusal")
        assert r.loaded.queues == "good"
        [(reason, note)] = reasons(events)
        assert reason == "ConfigRejected" and "Korral refused it: queue root.x: bad max" in note
        change(r, cm("yunikorn-configs", **{"queues.yaml": "bad"}))
        await asyncio.sleep(0.05)
        assert len(api.requests) == 1  # the same refused config is not sent again
        change(r, cm("yunikorn-configs", **{"queues.yaml": "fixed"}))
        await wait_until_async(lambda: r.reloads == 1, 5, "the fixed one")
        assert r.loaded.queues == "fixed"
    run(main())


def test_korral_out_of_reach_is_retried(monkeypatch):
    monkeypatch.setattr(reloader_module, "RETRY_SECONDS", 0.01)

    async def main():
        down = SchedulerError("UpdateConfiguration", grpc.StatusCode.UNAVAILABLE, "rmproxy restarting")
        api = FakeAPI(down, down)
        r, _ = await started(cm("yunikorn-configs", **{"queues.yaml": "a"}), api=api)
        change(r, cm("yunikorn-configs", **{"queues.yaml": "b"}))
        await wait_until_async(lambda: r.reloads == 1, 5, "the reload after two failures")
        assert len(api.requests) == 3 and r.loaded.queues == "b"
    run(main())


def test_hot_refresh_off_changes_nothing():
    async def main():
        api = FakeAPI()
        r, _ = await started(cm("yunikorn-configs", **{"queues.yaml": "a", "service.enableConfigHotRefresh": "false"}),
                             api=api)
        change(r, cm("yunikorn-configs", **{"queues.yaml": "b", "service.enableConfigHotRefresh": "true"}))
        await asyncio.sleep(0.05)
        assert not api.requests and r.loaded.queues == "a"
    run(main())
