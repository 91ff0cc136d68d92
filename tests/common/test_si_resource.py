"""SI Resource messages to Resources: the plain conversion and the worker's per-size cache."""

import pytest

from common import si_pb2
from common.resources import Resource
from common.si_resource import SiResourceCache, fill_si_resource, resource_from_si


def _msg(**values: int) -> si_pb2.Resource:
    return fill_si_resource(si_pb2.Resource(), values)


def test_resource_from_si_reads_every_name():
    assert resource_from_si(_msg(memory=10, vcore=1)) == Resource({"memory": 10, "vcore": 1})


def test_resource_from_si_refuses_an_empty_name():
    with pytest.raises(ValueError, match="non-empty"):
        resource_from_si(_msg(**{"": 1}))


def test_cache_gives_one_shared_resource_per_size():
    cache = SiResourceCache()
    a = cache.get(_msg(memory=10, vcore=1))
    b = cache.get(_msg(memory=10, vcore=1))
    c = cache.get(_msg(memory=20, vcore=1))
    assert a is b
    assert a == Resource({"memory": 10, "vcore": 1})
    assert c == Resource({"memory": 20, "vcore": 1}) and c is not a


def test_cache_refuses_an_invalid_size_every_time_and_keeps_none():
    cache = SiResourceCache()
    for _ in range(2):
        with pytest.raises(ValueError, match="non-empty"):
            cache.get(_msg(**{"": 1}))
    assert len(cache._by_bytes) == 0


def test_cache_starts_over_at_its_limit():
    cache = SiResourceCache(limit=2)
    first = cache.get(_msg(memory=1))
    cache.get(_msg(memory=2))
    cache.get(_msg(memory=3))  # the third size empties the cache first
    assert len(cache._by_bytes) == 1
    again = cache.get(_msg(memory=1))
    assert again == first and again is not first
