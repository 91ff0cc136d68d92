"""Fixtures of the deployment tests: deploy/kubernetes made ready and rendered once for the package.

- ``tree``: a copy of deploy/kubernetes with the production overlay's secret files made as
  docs/kubernetes.md says (skips without the ``openssl`` command line).
- ``renders``: every overlay and the monitoring kustomization rendered (name -> objects).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.deploy.kube import production_tree, render_all


@pytest.fixture(scope="package")
def tree(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line is needed to make the production overlay's certificates")
    return production_tree(tmp_path_factory.mktemp("kube"))


@pytest.fixture(scope="package")
def renders(tree) -> dict[str, list[dict]]:
    return render_all(tree)
