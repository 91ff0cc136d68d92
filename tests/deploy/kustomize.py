"""A small `kustomize build` in Python, for the features deploy/kubernetes uses, and no others.

The project's set-up installs no kustomize (Debian's kubectl, 1.20, embeds a kustomize without
``components``; PyPI has only third-party repackagings of the binary), so the tests render the
overlays with this. It implements exactly what the
kustomizations there use and refuses anything else (``Unsupported``), so it cannot silently
render a feature it does not know:

- ``resources`` (YAML files, or directories holding a kustomization), ``components``
  (``kind: Component``: applied to everything accumulated so far, as kustomize does);
- ``configMapGenerator`` / ``secretGenerator`` (``files``, ``literals``, ``envs``, ``type``),
  with ``generatorOptions`` ``disableNameSuffixHash: true`` (required: no name hashing, so no
  name-reference rewriting is needed) and ``labels``;
- ``patches`` with a ``path`` to strategic-merge patches (one or more documents, each naming its
  target by kind and name): maps merge, ``null`` deletes a key, lists of the core API's
  merge-keyed fields (containers, env, volumes, volumeMounts, ports, ...) merge by key with the
  patch's new items first (kustomize's order), other lists are replaced;
- ``namespace``, ``replicas``, ``images``, applied in kustomize's transformer order
  (patches, namespace, replicas, images).

Where ``kubectl`` (which embeds kustomize) is installed, tests/deploy/test_kubernetes.py also
renders with ``kubectl kustomize`` and requires the same objects.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "namespace", "resources", "components", "configMapGenerator",
                        "secretGenerator", "generatorOptions", "patches", "replicas", "images"}
GENERATOR_FIELDS = {"name", "files", "literals", "envs", "type"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PriorityClass", "StorageClass", "PersistentVolume"}
SCALABLE = {"Deployment", "StatefulSet", "ReplicaSet"}
# x-kubernetes-patch-merge-key of the core API's lists that a patch here may touch
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
              "volumes": "name", "env": "name", "imagePullSecrets": "name", "volumeMounts": "mountPath",
              "topologySpreadConstraints": "topologyKey"}


class Unsupported(ValueError):
    """The kustomization uses something this renderer does not implement."""


def obj_id(obj: dict) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta.get("name") or meta.get("generateName", "")


def load_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def build(directory: Path) -> list[dict]:
    """Render the kustomization in directory: the list of objects `kustomize build` would print."""
    return _accumulate(Path(directory), [], expect_kind="Kustomization")


def _read_kustomization(directory: Path, expect_kind: str) -> dict:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise Unsupported(f"{directory}: no kustomization.yaml")
    k = yaml.safe_load(path.read_text()) or {}
    unknown = set(k) - KUSTOMIZATION_FIELDS
    if unknown:
        raise Unsupported(f"{path}: fields this renderer does not implement: {sorted(unknown)}")
    if k.get("kind", "Kustomization") != expect_kind:
        raise Unsupported(f"{path}: kind {k.get('kind')!r}, expected {expect_kind}")
    return k


def _accumulate(directory: Path, acc: list[dict], expect_kind: str) -> list[dict]:
    k = _read_kustomization(directory, expect_kind)
    for entry in k.get("resources") or []:
        target = directory / entry
        if target.is_dir():
            _add(acc, build(target))
        else:
            _add(acc, load_docs(target))
    for entry in k.get("components") or []:
        acc = _accumulate(directory / entry, acc, expect_kind="Component")
    _add(acc, _generate(directory, k))
    for patch in k.get("patches") or []:
        if set(patch) != {"path"}:
            raise Unsupported(f"{directory}: only `patches: - path: FILE` is implemented, got {patch}")
        for doc in load_docs(directory / patch["path"]):
            _apply_patch(acc, doc, directory / patch["path"])
    if "namespace" in k:
        for obj in acc:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj.setdefault("metadata", {})["namespace"] = k["namespace"]
    for rep in k.get("replicas") or []:
        hits = [o for o in acc if o["kind"] in SCALABLE and o["metadata"]["name"] == rep["name"]]
        if not hits:
            raise Unsupported(f"{directory}: replicas for {rep['name']!r}, which is not in the resources")
        for obj in hits:
            obj["spec"]["replicas"] = rep["count"]
    for image in k.get("images") or []:
        _set_images(acc, image)
    return acc


def _add(acc: list[dict], objs: list[dict]) -> None:
    ids = {obj_id(o) for o in acc}
    for obj in objs:
        if obj_id(obj) in ids:
            raise Unsupported(f"duplicate object {obj_id(obj)}")
        acc.append(copy.deepcopy(obj))
        ids.add(obj_id(obj))


# --- generators ---------------------------------------------------------------------------------

def _env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise Unsupported(f"{path}: line without '=': {line!r}")
        out[key] = value
    return out


def _generate(directory: Path, k: dict) -> list[dict]:
    options = k.get("generatorOptions") or {}
    if set(options) - {"disableNameSuffixHash", "labels"}:
        raise Unsupported(f"{directory}: generatorOptions {sorted(options)}")
    generators = [("ConfigMap", g) for g in k.get("configMapGenerator") or []] + \
                 [("Secret", g) for g in k.get("secretGenerator") or []]
    if generators and options.get("disableNameSuffixHash") is not True:
        raise Unsupported(f"{directory}: generators need generatorOptions.disableNameSuffixHash: true here")
    out = []
    for kind, gen in generators:
        if set(gen) - GENERATOR_FIELDS:
            raise Unsupported(f"{directory}: {kind} generator fields {sorted(set(gen) - GENERATOR_FIELDS)}")
        data: dict[str, str] = {}
        for entry in gen.get("files") or []:
            key, sep, rel = entry.partition("=")
            path = directory / (rel if sep else key)
            data[key if sep else path.name] = path.read_text()
        for entry in gen.get("literals") or []:
            key, _, value = entry.partition("=")
            data[key] = value
        for env in gen.get("envs") or []:
            data.update(_env_file(directory / env))
        meta: dict[str, Any] = {"name": gen["name"]}
        if options.get("labels"):
            meta["labels"] = dict(options["labels"])
        obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": meta}
        if kind == "Secret":
            obj["data"] = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
            obj["type"] = gen.get("type", "Opaque")
        else:
            if "type" in gen:
                raise Unsupported(f"{directory}: ConfigMap generator with a type")
            obj["data"] = data
        out.append(obj)
    return out


# --- strategic merge patches ---------------------------------------------------------------------

def _apply_patch(acc: list[dict], patch: dict, source: Path) -> None:
    kind, name = patch.get("kind"), (patch.get("metadata") or {}).get("name")
    hits = [o for o in acc if o["kind"] == kind and o["metadata"].get("name") == name
            and o["apiVersion"] == patch.get("apiVersion")]
    if len(hits) != 1:
        raise Unsupported(f"{source}: patch for {kind}/{name} matches {len(hits)} objects")
    target = hits[0]
    merged = strategic_merge(target, patch)
    target.clear()
    target.update(merged)


def strategic_merge(original: dict, patch: dict) -> dict:
    out = copy.deepcopy(original)
    for key, value in patch.items():
        if key.startswith("$"):
            raise Unsupported(f"patch directive {key}")
        if value is None:
            out.pop(key, None)
        elif key in out:
            out[key] = _merge_value(key, out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_value(key: str, original: Any, patch: Any) -> Any:
    if isinstance(original, dict) and isinstance(patch, dict):
        return strategic_merge(original, patch)
    if isinstance(original, list) and isinstance(patch, list):
        merge_key = MERGE_KEYS.get(key)
        if key == "ports":
            merge_key = "containerPort" if any("containerPort" in p for p in original + patch) else "port"
        if merge_key is None:
            return copy.deepcopy(patch)
        by_key = {p[merge_key]: p for p in patch}
        if len(by_key) != len(patch):
            raise Unsupported(f"patch list {key} repeats a {merge_key}")
        present = {o[merge_key] for o in original}
        new = [copy.deepcopy(p) for p in patch if p[merge_key] not in present]
        kept = [strategic_merge(o, by_key[o[merge_key]]) if o[merge_key] in by_key else copy.deepcopy(o)
                for o in original]
        return new + kept
    return copy.deepcopy(patch)


# --- images ---------------------------------------------------------------------------------------

def split_image(image: str) -> tuple[str, str | None]:
    """``[registry/]name[:tag]`` -> (name with registry, tag or None); digests are not used here."""
    if "@" in image:
        raise Unsupported(f"image by digest: {image}")
    head, _, last = image.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
        return (f"{head}/{last}" if head else last), tag
    return image, None


def _containers(node: Any):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def _set_images(acc: list[dict], spec: dict) -> None:
    if set(spec) - {"name", "newName", "newTag"}:
        raise Unsupported(f"images entry {spec}")
    for obj in acc:
        for container in _containers(obj):
            name, tag = split_image(container["image"])
            if name != spec["name"]:
                continue
            name = spec.get("newName", name)
            tag = spec.get("newTag", tag)
            container["image"] = f"{name}:{tag}" if tag else name
