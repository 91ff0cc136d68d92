"""Regenerate the Python modules of the SI protos (``common/*_pb2*.py``).

The generated files are committed, so installing Korral needs no protoc;
``tests/wire/test_generated_current.py`` fails when they are stale. Run
``python -m common.protogen`` after editing a ``.proto`` file.

Three SI modules come out of two SI files (docs/si-revisions.md):

- ``si_pb2`` from ``si.proto``, the seed's revision, in protobuf's default pool;
- ``si_v18_pb2`` from ``si_v18.proto``, SI v1.8. It defines package ``si.v1`` too, so it
  loads into a descriptor pool of its own (one line of the generated module is rewritten):
  RMs and tests can import both revisions in one process;
- ``si_internal_pb2``, Korral's internal model: the union of every message the four
  ``si.v1.Scheduler`` RPCs carry in either revision, as package ``korral.si``. rmproxy and the
  workers read requests and write responses with it. It is built here by merging the two
  files' descriptors, which also proves the two revisions never give one field number two
  meanings (a conflict stops the generation).
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

__all__ = ["PROTOS", "OWN_POOL", "INTERNAL", "ROOT", "generate", "merge_revisions", "main"]

# one protoc run per group: the two SI revisions cannot be compiled together (both define si.v1)
PROTOS = (("common/si.proto", "common/korral.proto"), ("common/si_v18.proto",))
OWN_POOL = ("common/si_v18.proto",)  # loaded into a pool of their own (see module doc)
INTERNAL = "common/si_internal.proto"  # generated from the merged descriptor; no file on disk
INTERNAL_PACKAGE = "korral.si"
ROOT = pathlib.Path(__file__).resolve().parent.parent

_DEFAULT_POOL = "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile("
_OWN_POOL = (
    "# Korral (common/protogen.py): si.v1 is defined by both SI revisions, so this one has a pool of its own\n"
    "_POOL = _descriptor_pool.DescriptorPool()\n"
    "_POOL.AddSerializedFile(google_dot_protobuf_dot_descriptor__pb2.DESCRIPTOR.serialized_pb)\n"
    "DESCRIPTOR = _POOL.AddSerializedFile("
)


def _protoc(args: list[str]) -> None:
    from grpc_tools import protoc

    if protoc.main(["protoc", *args]) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))


def _include() -> str:
    import grpc_tools

    return str(pathlib.Path(grpc_tools.__file__).parent / "_proto")


def _descriptor(tmp: pathlib.Path, proto: str):
    """The FileDescriptorProto of one proto file."""
    from google.protobuf import descriptor_pb2

    out = tmp / "set.pb"
    _protoc([f"-I{ROOT}", f"-I{_include()}", f"--descriptor_set_out={out}", str(ROOT / proto)])
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]


def _reachable(fd, roots: list[str]) -> list[str]:
    """Names of the top-level messages reachable from ``roots`` (in file order)."""
    by_name = {m.name: m for m in fd.message_type}
    prefix = f".{fd.package}."
    seen: set[str] = set()

    def walk(msg) -> None:
        for f in msg.field:
            if f.type_name.startswith(prefix):
                top = f.type_name[len(prefix):].split(".")[0]
                if top in by_name and top not in seen:
                    seen.add(top)
                    walk(by_name[top])
        for nested in msg.nested_type:
            walk(nested)

    for r in roots:
        seen.add(r)
        walk(by_name[r])
    return [m.name for m in fd.message_type if m.name in seen]


def _merge_enum(into, other, where: str) -> None:
    numbers = {v.number: v.name for v in into.value}
    for v in other.value:
        if v.number in numbers and numbers[v.number] != v.name:
            raise ValueError(f"{where}: value {v.number} is {numbers[v.number]} in one revision, "
                             f"{v.name} in the other")
        if v.number not in numbers:
            into.value.add().CopyFrom(v)


def _merge_by_name(into, other, merge, where: str) -> None:
    """Each named element of ``other`` merged into ``into``'s of the same name, or added."""
    mine = {x.name: x for x in into}
    for x in other:
        if x.name in mine:
            merge(mine[x.name], x, f"{where}.{x.name}" if where else x.name)
        else:
            into.add().CopyFrom(x)


def _merge_message(into, other, where: str) -> None:
    fields = {f.number: f for f in into.field}
    for f in other.field:
        mine = fields.get(f.number)
        if mine is None:
            into.field.add().CopyFrom(f)
        elif (mine.name, mine.type, mine.label, mine.type_name) != (f.name, f.type, f.label, f.type_name):
            raise ValueError(f"{where}: field {f.number} is {mine.name} in one revision, {f.name} in the other")
    _merge_by_name(into.nested_type, other.nested_type, _merge_message, where)
    _merge_by_name(into.enum_type, other.enum_type, _merge_enum, where)
    # numbers one revision reserved and the other uses are fields of the union
    used = {f.number for f in into.field}
    names = {f.name for f in into.field}
    keep = [r for r in list(into.reserved_range) + list(other.reserved_range)
            if not any(r.start <= n < r.end for n in used)]
    keep_names = sorted({n for n in list(into.reserved_name) + list(other.reserved_name) if n not in names})
    del into.reserved_range[:]
    del into.reserved_name[:]
    for r in sorted({(r.start, r.end) for r in keep}):
        into.reserved_range.add(start=r[0], end=r[1])
    into.reserved_name.extend(keep_names)


def _renamed(msg, old: str, new: str) -> None:
    for f in msg.field:
        if f.type_name.startswith(old):
            f.type_name = new + f.type_name[len(old):]
    for nested in msg.nested_type:
        _renamed(nested, old, new)


def merge_revisions(seed, v18):
    """The internal superset: every message reachable from the Scheduler service in either
    revision, merged by field number (a number with two meanings raises ``ValueError``)."""
    from google.protobuf import descriptor_pb2

    roots = [t.split(".")[-1] for m in seed.service[0].method for t in (m.input_type, m.output_type)]
    out = descriptor_pb2.FileDescriptorProto(name=INTERNAL, package=INTERNAL_PACKAGE, syntax="proto3")
    for fd in (seed, v18):
        reachable = set(_reachable(fd, roots))
        _merge_by_name(out.message_type, [m for m in fd.message_type if m.name in reachable], _merge_message, "")
        _merge_by_name(out.enum_type, fd.enum_type, _merge_enum, "")
    for m in out.message_type:
        _renamed(m, f".{seed.package}.", f".{INTERNAL_PACKAGE}.")
    return out


def generate(out_dir: pathlib.Path) -> None:
    """Write the generated modules for PROTOS and the internal superset under out_dir/common/."""
    from google.protobuf import descriptor_pb2

    (out_dir / "common").mkdir(parents=True, exist_ok=True)
    for group in PROTOS:
        _protoc([f"-I{ROOT}", f"-I{_include()}", f"--python_out={out_dir}", f"--pyi_out={out_dir}",
                 f"--grpc_python_out={out_dir}", *(str(ROOT / p) for p in group)])
    for proto in OWN_POOL:
        module = out_dir / proto.replace(".proto", "_pb2.py")
        text = module.read_text()
        if _DEFAULT_POOL not in text:
            raise RuntimeError(f"{module}: protoc's output changed shape, cannot give it a pool of its own")
        module.write_text(text.replace(_DEFAULT_POOL, _OWN_POOL, 1))
    with tempfile.TemporaryDirectory() as tmp:
        internal = merge_revisions(_descriptor(pathlib.Path(tmp), "common/si.proto"),
                                   _descriptor(pathlib.Path(tmp), "common/si_v18.proto"))
        merged = pathlib.Path(tmp) / "internal.pb"
        merged.write_bytes(descriptor_pb2.FileDescriptorSet(file=[internal]).SerializeToString())
        _protoc([f"--descriptor_set_in={merged}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", INTERNAL])


def main() -> int:
    generate(ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
