"""The committed generated modules (common/*_pb2*.py) are what protoc makes of the .proto files now."""

from __future__ import annotations

import pathlib

from common import protogen


def test_generated_code_is_current(tmp_path: pathlib.Path):
    protogen.generate(tmp_path)
    for generated in sorted((tmp_path / "common").glob("*_pb2*.py*")):
        committed = protogen.ROOT / "common" / generated.name
        assert committed.exists(), f"{committed} is missing: run python -m common.protogen"
        assert committed.read_text() == generated.read_text(), (
            f"{committed.name} is stale: run python -m common.protogen and commit the result")
