"""The namespace annotations the k8s shim passes as app tags, applied to the app's queue as
YuniKorn 1.9's core does (``PartitionContext.AddApplication``).

What it owns: reading ``namespace.resourcequota`` (max), ``namespace.resourceguaranteed``
(guaranteed) and ``namespace.resourcemaxapps`` (maxapplications) and setting them on the leaf
queue the app was placed in. Who may use it: ``lifecycle`` (adding an app).

YuniKorn's rules, followed here:
- only a dynamic leaf (one placement created, not one from the config) takes them, and never
  ``root.@recovery@``; they are applied each time an app is added to it;
- the resource tags are JSON ``si.Resource`` (``{"resources": {"memory": {"value": 1}}}``; a
  plain ``{"memory": 1}`` map is accepted too, a Korral leniency); a value that is not valid
  JSON, or has a negative quantity, or no quantity > 0, is ignored;
- when either resource tag gives a value, both are set: the one not given is cleared
  (YuniKorn sets max and guaranteed together);
- ``namespace.resourcemaxapps`` is an unsigned integer; 0 (or a bad value) leaves the queue's
  maxapplications as it is.
A value that cannot be read is reported with an APP event naming the app, the tag and why,
whatever the queue (YuniKorn logs a warning); the app is placed all the same.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Callable

from common.constants import (APP_TAG_NAMESPACE_RESOURCE_GUARANTEED, APP_TAG_NAMESPACE_RESOURCE_MAX_APPS,
                              APP_TAG_NAMESPACE_RESOURCE_QUOTA)
from common.resources import Resource

from .queue import RECOVERY_QUEUE

if TYPE_CHECKING:  # pragma: no cover
    from .queue import Queue

__all__ = ["apply_namespace_tags", "parse_max_apps", "NAMESPACE_TAGS"]

NAMESPACE_TAGS = (APP_TAG_NAMESPACE_RESOURCE_QUOTA, APP_TAG_NAMESPACE_RESOURCE_GUARANTEED,
                  APP_TAG_NAMESPACE_RESOURCE_MAX_APPS)
_UINT = re.compile(r"[0-9]+\Z")  # Go's strconv.ParseUint(s, 10, 64) syntax


def _resource(raw: str) -> tuple[Resource | None, str]:
    """The resource of a tag value and why it is ignored ("": it is not)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None, "not JSON"
    if not isinstance(data, dict):
        return None, "not a JSON object"
    items = data.get("resources", data)
    if not isinstance(items, dict):
        return None, "resources is not a JSON object"
    values: dict[str, int] = {}
    for name, v in items.items():
        if isinstance(v, dict):
            v = v.get("value")
        if isinstance(v, bool) or not isinstance(v, int):
            return None, f"quantity of {name} is not an integer"
        values[str(name)] = v
    resource = Resource(values)
    if resource.has_negative():
        return None, "a quantity is negative"
    if not resource.strictly_greater_than_zero():
        return None, "no quantity is greater than zero"
    return resource, ""


def parse_max_apps(raw: str) -> tuple[int, str]:
    """``namespace.resourcemaxapps``: the number (0: not set) and why it is ignored."""
    text = raw.strip()
    if not _UINT.match(text) or int(text) >= 1 << 64:
        return 0, "not an unsigned integer"
    return int(text), ""


def apply_namespace_tags(queue: "Queue", app_id: str, tags: dict[str, str],
                         report: Callable[[str, str], None]) -> None:
    """Set the namespace tags of an app being added to ``queue`` on it (see the module doc).
    ``report(tag, message)`` is told about each value that cannot be read (whatever the queue)."""
    if not any(t in tags for t in NAMESPACE_TAGS):
        return
    found: dict[str, Resource | None] = {}
    for tag in (APP_TAG_NAMESPACE_RESOURCE_QUOTA, APP_TAG_NAMESPACE_RESOURCE_GUARANTEED):
        raw = tags.get(tag)
        found[tag] = None
        if raw:
            found[tag], why = _resource(raw)
            if why:
                report(tag, f"application {app_id}: tag {tag} ignored ({why}): {raw}")
    max_apps = 0
    raw_apps = tags.get(APP_TAG_NAMESPACE_RESOURCE_MAX_APPS)
    if raw_apps:
        max_apps, why = parse_max_apps(raw_apps)
        if why:
            report(APP_TAG_NAMESPACE_RESOURCE_MAX_APPS,
                   f"application {app_id}: tag {APP_TAG_NAMESPACE_RESOURCE_MAX_APPS} ignored ({why}): {raw_apps}")
    if not queue.dynamic or queue.path == RECOVERY_QUEUE:
        return  # a queue from the config keeps its own settings
    if max_apps:
        queue.max_apps = max_apps
    quota, guaranteed = found[APP_TAG_NAMESPACE_RESOURCE_QUOTA], found[APP_TAG_NAMESPACE_RESOURCE_GUARANTEED]
    if quota is not None or guaranteed is not None:
        queue.max = quota
        queue.guaranteed = guaranteed
