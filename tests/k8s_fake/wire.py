"""Comparing the double's answers with the recordings of a real kube-apiserver
(``../shared/k8s-wire``), as its README says: status, content type and body field by field;
the fields that vary between runs by presence and type; resourceVersions by their relations.

``Translator`` carries what one replay learns (recorded resourceVersion and uid -> the double's)
so requests that quote them (a watch from a list's version, preconditions, continue tokens) can
be rewritten, and so a recorded relation (a DELETED line one above the DELETE's answer, a page
reusing the first page's version) must hold between the double's values too.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
WIRE = REPO.parent / "shared" / "k8s-wire"  # as CI lays it out: shared/ beside the clone
if not WIRE.is_dir():  # a worktree under /work/wt/NAME: shared/ is two levels up
    for parent in REPO.parents:
        if (parent / "shared" / "k8s-wire").is_dir():
            WIRE = parent / "shared" / "k8s-wire"
            break

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
NUMBER = re.compile(r"\b\d+\b")
DIGITS = re.compile(r"^\d+$")

# keys whose values vary between runs: compare presence and type only (README, "Fields that vary")
VARYING = {"uid", "creationTimestamp", "resourceVersion", "managedFields", "deletionTimestamp", "continue",
           "lastTransitionTime", "lastHeartbeatTime", "serverAddress", "startTime"}


def recordings() -> list[Path]:
    return sorted(WIRE.glob("[0-9][0-9]-*.json")) if WIRE.is_dir() else []


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


class Translator:
    """Recorded resourceVersions/uids -> the double's, learned from the answers compared so far."""

    def __init__(self) -> None:
        self.rv: dict[int, int] = {}
        self.rv_owner: dict[int, str] = {}  # recorded version -> the object that carried it
        self.uid: dict[str, str] = {}
        self.problems: list[str] = []

    def learn_rv(self, recorded: str, actual: str, where: str, owner: str = "") -> None:
        if not (DIGITS.match(str(recorded)) and DIGITS.match(str(actual))):
            return
        r, a = int(recorded), int(actual)
        if r in self.rv and self.rv[r] != a and not owner and self.rv_owner.get(r):
            return  # a list's version vs an object's: equal only when that object was the last write
        if r in self.rv and self.rv[r] != a:
            self.problems.append(f"{where}: recorded resourceVersion {r} was answered as {self.rv[r]} before "
                                 f"and as {a} here (the real server used one value for both)")
            return
        self.rv[r] = a
        self.rv_owner.setdefault(r, owner)
        # consecutive writes of one object stay consecutive ("a DELETED line is one higher than
        # the DELETE's answer"); writes of different objects may interleave differently
        for step in (-1, 1):
            if (r + step in self.rv and self.rv[r + step] != a + step and owner
                    and self.rv_owner.get(r + step) == owner):
                self.problems.append(f"{where}: recorded resourceVersions {r} and {r + step} are consecutive; "
                                     f"the double answered {a} and {self.rv[r + step]}")

    def learn_uid(self, recorded: str, actual: str) -> None:
        if isinstance(recorded, str) and isinstance(actual, str) and UUID.fullmatch(recorded):
            self.uid.setdefault(recorded, actual)

    def anchor(self, recorded: str, current: int) -> None:
        """A version the recording quotes that this replay has not seen: the state the recorded
        server was in when it was sent is the double's state now (unless it is far ahead: a
        deliberately future version keeps its distance from the newest one known)."""
        if not DIGITS.match(str(recorded)):
            return
        r = int(recorded)
        if r in (0, 1) or r in self.rv:
            return
        newest = max(self.rv) if self.rv else 0
        if r > newest and (not self.rv or r - newest < 50_000):
            self.rv[r] = current

    def rv_of(self, recorded: str) -> str:
        """The double's version for a recorded one: known exactly, else by the nearest known
        recorded version (a version a little older than a known one is as stale in both)."""
        if not DIGITS.match(str(recorded)):
            return recorded
        r = int(recorded)
        if r in (0, 1) or not self.rv:
            return str(r)
        if r in self.rv:
            return str(self.rv[r])
        below = [k for k in self.rv if k < r]
        if below:
            k = max(below)
            return str(self.rv[k] + (r - k))
        k = min(self.rv)
        return str(max(1, self.rv[k] - (k - r)))

    def request_value(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: self.request_value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.request_value(v, key) for v in value]
        if isinstance(value, str):
            if key == "resourceVersion":
                return self.rv_of(value)
            if value in self.uid:
                return self.uid[value]
        return value

    def continue_token(self, token: str) -> str:
        try:
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        except ValueError:
            return token
        if isinstance(data, dict) and isinstance(data.get("rv"), int) and data["rv"] > 0:
            data["rv"] = int(self.rv_of(str(data["rv"])))
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _type(value: Any) -> str:
    return type(value).__name__


def normalise_message(text: str) -> str:
    return NUMBER.sub("N", UUID.sub("UID", text))


def compare(expected: Any, actual: Any, path: str, tr: Translator, out: list[str], *,
            generated_name: str | None = None, message_kind_only: bool = False, unordered: bool = False) -> None:
    """Append a line to ``out`` for every difference between a recorded value and the double's."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in expected.keys() | actual.keys():
            sub = f"{path}.{key}" if path else key
            if key not in actual:
                out.append(f"{sub}: missing (recorded {json.dumps(expected[key])[:120]})")
                continue
            if key not in expected:
                out.append(f"{sub}: not in the recording (double: {json.dumps(actual[key])[:120]})")
                continue
            e, a = expected[key], actual[key]
            if key in VARYING:
                if key == "resourceVersion" and isinstance(e, str):
                    if not isinstance(a, str) or not DIGITS.match(a):
                        out.append(f"{sub}: {a!r} is not a string of digits")
                    elif "items" not in sub:  # list items carry versions of setup writes
                        owner = (f"{expected.get('namespace', '')}/{expected['name']}"
                                 if path.endswith("metadata") and expected.get("name") else "")
                        tr.learn_rv(e, a, sub, owner)
                elif key == "uid":
                    if _type(e) != _type(a):
                        out.append(f"{sub}: type {_type(a)}, recorded {_type(e)}")
                    tr.learn_uid(e, a)
                elif _type(e) != _type(a):
                    out.append(f"{sub}: type {_type(a)} ({a!r:.60}), recorded {_type(e)} ({e!r:.60})")
                continue
            if key == "name" and path.endswith("metadata") and generated_name and isinstance(a, str):
                if not (a.startswith(generated_name) and len(a) == len(generated_name) + 5):
                    out.append(f"{sub}: {a!r} is not {generated_name!r} plus 5 characters")
                continue
            if key == "message" and isinstance(e, str) and isinstance(a, str) and (path == "" or
                                                                                    path.endswith("object")):
                if not message_kind_only and normalise_message(e) != normalise_message(a):
                    out.append(f"{sub}: {a!r}\n      recorded {e!r}")
                continue
            compare(e, a, sub, tr, out, generated_name=generated_name, message_kind_only=message_kind_only,
                    unordered=unordered)
        return
    if isinstance(expected, list) and isinstance(actual, list):
        if unordered and all(isinstance(x, dict) and "metadata" in x for x in expected + actual):
            def ident(x: dict) -> tuple:
                return (x["metadata"].get("namespace", ""), x["metadata"].get("name", ""))
            e_map, a_map = {ident(x): x for x in expected}, {ident(x): x for x in actual}
            if set(e_map) != set(a_map):
                out.append(f"{path}: items {sorted(a_map)}, recorded {sorted(e_map)}")
            for k in e_map.keys() & a_map.keys():
                compare(e_map[k], a_map[k], f"{path}[{k[1]}]", tr, out, generated_name=generated_name)
            return
        if len(expected) != len(actual):
            out.append(f"{path}: {len(actual)} items, recorded {len(expected)}: "
                       f"{json.dumps(actual)[:200]} vs {json.dumps(expected)[:200]}")
            return
        for i, (e, a) in enumerate(zip(expected, actual)):
            compare(e, a, f"{path}[{i}]", tr, out, generated_name=generated_name, message_kind_only=message_kind_only)
        return
    if expected != actual:
        out.append(f"{path}: {json.dumps(actual)[:200]}, recorded {json.dumps(expected)[:200]}")


def sorted_by_key(items: list[dict]) -> bool:
    keys = [(i["metadata"].get("namespace", ""), i["metadata"].get("name", "")) for i in items]
    return keys == sorted(keys)


def compare_lines(expected: list[dict], actual: list[dict], tr: Translator, out: list[str]) -> None:
    """Watch lines: the same (type, object) sequence per object name; across objects the order is
    free when several changed at once (README, "How to use them" 3)."""
    def per_name(lines: list[dict]) -> dict[str, list[dict]]:
        groups: dict[str, list[dict]] = {}
        for line in lines:
            meta = (line.get("object") or {}).get("metadata") or {}
            groups.setdefault(meta.get("name", f"<{line.get('type')}>"), []).append(line)
        return groups
    e_groups, a_groups = per_name(expected), per_name(actual)
    e_types = [(n, [l["type"] for l in g]) for n, g in sorted(e_groups.items())]
    a_types = [(n, [l["type"] for l in g]) for n, g in sorted(a_groups.items())]
    if e_types != a_types:
        out.append(f"watch lines {a_types}, recorded {e_types}")
        return
    for name in e_groups:
        for i, (e, a) in enumerate(zip(e_groups[name], a_groups[name])):
            # a BOOKMARK's version is the watch cache's newest: compared by type, not related
            compare(e, a, f"line[{name}#{i}]", Translator() if e.get("type") == "BOOKMARK" else tr, out)
