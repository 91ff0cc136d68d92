"""queues.yaml text for tests whose root lets anyone submit: the header written once.

``queues_yaml(open_root(QUEUES, rules=RULES))`` is a complete config: partition ``default``
whose root has ``submitacl: '*'``, the queues of the YAML list ``QUEUES`` under root and the
placement rules of the YAML list ``RULES`` (both written from column 0; either may be left
out). Several ``open_root(..., name=...)`` make several partitions. A config that tests the
header itself (a closed root, a root left out) is written out whole.
"""

from __future__ import annotations

from textwrap import dedent, indent

__all__ = ["queues_yaml", "open_root"]


def open_root(queues: str = "", *, rules: str = "", name: str = "default") -> str:
    """One partition of a queues.yaml (the text under ``partitions:``), root open to all."""
    text = f"  - name: {name}\n    queues:\n      - name: root\n        submitacl: '*'\n"
    if queues.strip():
        text += "        queues:\n" + indent(dedent(queues).strip("\n") + "\n", " " * 10)
    if rules.strip():
        text += "    placementrules:\n" + indent(dedent(rules).strip("\n") + "\n", " " * 6)
    return text


def queues_yaml(*partitions: str) -> str:
    """A whole queues.yaml of the partitions ``open_root`` made."""
    return "\npartitions:\n" + "".join(partitions)
