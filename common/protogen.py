"""Regenerate the Python modules of the SI protos (``common/*_pb2*.py``).

The generated files are committed, so installing Korral needs no protoc;
``tests/wire/test_generated_current.py`` fails when they are stale. Run
``python -m common.protogen`` after editing a ``.proto`` file.
"""

from __future__ import annotations

import pathlib
import sys

__all__ = ["PROTOS", "ROOT", "generate", "main"]

PROTOS = ("common/si.proto", "common/korral.proto")
ROOT = pathlib.Path(__file__).resolve().parent.parent


def generate(out_dir: pathlib.Path) -> None:
    """Write the generated modules for PROTOS under out_dir/common/."""
    from grpc_tools import protoc
    import grpc_tools

    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    (out_dir / "common").mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(ROOT / p) for p in PROTOS),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))


def main() -> int:
    generate(ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
