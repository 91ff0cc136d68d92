"""A web UI directory that rmproxy serves at ``/`` (``korral rmproxy --ui-dir``, ``korral up
--ui-dir``): checked in one place, so both refuse the same directories with the same words."""

from __future__ import annotations

from pathlib import Path

__all__ = ["check_ui_dir"]


def check_ui_dir(path: str) -> Path:
    """The resolved directory; ``ValueError`` naming it unless it holds an ``index.html``."""
    root = Path(path).expanduser().resolve()
    if not (root / "index.html").is_file():
        raise ValueError(f"--ui-dir {path}: no index.html in {root} (give the directory of a built web UI, "
                         f"e.g. YuniKorn web's dist/yunikorn-web)")
    return root
