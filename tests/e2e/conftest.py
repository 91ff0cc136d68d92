"""End-to-end fixtures: a real stack started by ``korral up`` (real Redis, broker, workers, rmproxy).

- ``stack``: one stack per test, ``--workers 2``. Parametrise with
  ``@pytest.mark.parametrize("stack_options", [{"workers": 3, "extra": ("--log-level", "debug")}])``.
- ``module_stack``: one stack shared by every test of a module (for read-mostly tests).
- ``stack_factory`` (from tests/conftest.py): start several stacks in one test.
- ``pki``: a test CA, another CA, a server certificate for 127.0.0.1 and client certificates,
  made with the ``openssl`` command line (skips when it is missing).
- ``lab``: a ``tests/e2e/netns.py`` ``NetLab`` (network-namespace hosts), closed after the test,
  also on failure; leftovers found while closing fail the test.

Every stack is stopped with ``korral down`` at teardown, and the fixture fails the test
if any of its processes (supervisord, its children, the embedded Redis) is left.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import start_stack, stop_and_verify
from tests.e2e.netns import NetLab


@pytest.fixture
def stack_options() -> dict:
    """Override (or parametrise) to change the ``stack`` fixture: ``workers`` and ``extra`` flags."""
    return {}


@pytest.fixture
def stack(stack_factory, stack_options):
    """A running stack (``StackHandle``): ``si_address``, ``rest_address``, ``state_dir``, ``redis_url``, ``pids``."""
    return stack_factory(workers=stack_options.get("workers", 2), extra=tuple(stack_options.get("extra", ())))


@pytest.fixture(scope="module")
def module_stack(tmp_path_factory):
    """One running stack (``--workers 2``) for a whole test module, checked at module teardown."""
    handle = start_stack(tmp_path_factory.mktemp("module-stack") / "state")
    yield handle
    problems = stop_and_verify(handle)
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture
def lab(tmp_path):
    """A NetLab closed after the test, also on failure; leftovers found while closing fail the test."""
    net = NetLab(tmp_path / "logs")
    try:
        yield net
    finally:
        problems = net.close()
    assert problems == []


def openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30, cwd=cwd)
    assert result.returncode == 0, f"openssl {' '.join(args)}: {result.stderr}"


def make_ca(d: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)


def make_cert(d: Path, ca: str, name: str, san: str | None) -> None:
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", cwd=d)
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.crt", "-extfile", ext.name, cwd=d)


@pytest.fixture
def pki(tmp_path) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line is needed to make test certificates")
    d = tmp_path / "pki"
    d.mkdir()
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    make_cert(d, "ca", "server", "IP:127.0.0.1,DNS:localhost")
    make_cert(d, "ca", "rm", None)
    make_cert(d, "other-ca", "stranger", None)
    return d
