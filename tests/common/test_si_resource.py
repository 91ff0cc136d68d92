"""SI Resource messages to Resources and back."""

import pytest

from common import si_pb2
from common.resources import Resource
from common.si_resource import fill_si_resource, resource_from_si


def _msg(**values: int) -> si_pb2.Resource:
    return fill_si_resource(si_pb2.Resource(), values)


def test_resource_from_si_reads_every_name():
    assert resource_from_si(_msg(memory=10, vcore=1)) == Resource({"memory": 10, "vcore": 1})


def test_resource_from_si_refuses_an_empty_name():
    with pytest.raises(ValueError, match="non-empty"):
        resource_from_si(_msg(**{"": 1}))
