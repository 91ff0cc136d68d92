"""What deploy/Dockerfile puts in the image, rebuilt without Docker.

The Dockerfile's COPY instructions are replayed into a staging directory (honouring
.dockerignore's cache/state patterns), then its install step runs there as
``pip wheel --no-deps --no-build-isolation`` (offline: the virtualenv already holds setuptools).
The wheel must hold every module and data file of the packages, and the ``korral`` entry
point; installed on its own, every process subcommand must start (``--help``), as the
Dockerfile's ``RUN korral --help`` checks in a real build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.deploy.compose import DOCKERFILE, REPO, dockerfile_instructions

IGNORED_DIRS = {"__pycache__", ".pytest_cache", ".hypothesis"}


def stage(dest_root: Path) -> dict[str, str]:
    """Replay WORKDIR/COPY/ENV of the Dockerfile into dest_root (as /); returns the ENV it sets."""
    workdir = Path("/")
    env: dict[str, str] = {}
    for word, args in dockerfile_instructions(DOCKERFILE.read_text()):
        if word == "WORKDIR":
            workdir = workdir / args
        elif word == "ENV":
            for pair in args.split():
                key, _, value = pair.partition("=")
                env[key] = value
        elif word == "COPY":
            parts = [a for a in args.split() if not a.startswith("--")]
            *sources, target = parts
            target_path = dest_root / (workdir / target).relative_to("/")
            into_dir = target.endswith("/") or len(sources) > 1
            for src in sources:
                src_path = REPO / src
                if src_path.is_dir():
                    shutil.copytree(src_path, target_path, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns(*IGNORED_DIRS, "*.pyc"))
                else:
                    dest = target_path / src_path.name if into_dir else target_path
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src_path, dest)
    return env


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    root = tmp_path_factory.mktemp("image")
    env = stage(root)
    app = root / "opt" / "korral"
    out = root / "wheels"
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                             "--no-index", "-q", "-w", str(out), "."], cwd=app, capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, f"the Dockerfile's package install would fail:\n{result.stdout}\n{result.stderr}"
    [wheel] = list(out.glob("korral-*.whl"))
    return root, env, wheel


def package_files() -> set[str]:
    """Every file the installed package should carry: modules and package data of the find-include packages.

    ``[tool.setuptools.packages.find]`` in pyproject.toml finds namespace packages too, so every
    directory under a top package (``rmproxy/web`` with the dashboard's assets) is a package.
    """
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    tops = [p.rstrip("*") for p in cfg["packages"]["find"]["include"]]
    data_patterns = cfg["package-data"]["*"]
    wanted = set()
    for top in tops:
        for path in (REPO / top).rglob("*"):
            if not path.is_file() or IGNORED_DIRS & set(path.parts) or path.suffix == ".pyc":
                continue
            rel = path.relative_to(REPO).as_posix()
            if path.suffix == ".py" or any(path.match(p) for p in data_patterns):
                wanted.add(rel)
    return wanted


def test_wheel_holds_every_module_and_data_file(image):
    _, _, wheel = image
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(package_files() - names)
    assert missing == [], f"files the image would lack: {missing}"


def test_vendored_code_carries_its_licence_into_the_image(image):
    _, _, wheel = image
    names = set(zipfile.ZipFile(wheel).namelist())
    vendored = [p for top in ("common", "broker", "partition_worker", "rmproxy")
                for p in (REPO / top).glob("**/vendor/*") if p.is_dir()]
    assert vendored, "expected vendored code (the dashboard's uPlot)"
    for d in vendored:
        licence = (d / "LICENSE").relative_to(REPO).as_posix()
        assert (d / "LICENSE").is_file() and licence in names, f"{licence} missing from the repository or the wheel"


def test_the_image_installs_the_tested_versions(image):
    root, _, _ = image
    text = DOCKERFILE.read_text()
    assert (root / "opt" / "korral" / "constraints.txt").is_file(), "constraints.txt is not copied into the image"
    assert "pip install -c constraints.txt ." in text, "the image's install is not pinned by constraints.txt"


def test_wheel_declares_the_korral_entry_point(image):
    _, _, wheel = image
    with zipfile.ZipFile(wheel) as zf:
        [ep] = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = zf.read(ep).decode()
    assert "korral = common.cli:main" in text


def test_deploy_dir_env_points_at_the_copied_templates(image):
    root, env, _ = image
    deploy_dir = env.get("KORRAL_DEPLOY_DIR")
    assert deploy_dir, "the Dockerfile should set KORRAL_DEPLOY_DIR for `korral up` inside the image"
    assert (root / deploy_dir.lstrip("/") / "supervisord.conf.tmpl").is_file()


def test_installed_wheel_runs_every_process_command(image, tmp_path):
    _, _, wheel = image
    target = tmp_path / "site"
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                             str(target), str(wheel)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("KORRAL_")}
    env["PYTHONPATH"] = str(target)  # ahead of the editable install of this checkout
    where = subprocess.run([sys.executable, "-c", "import common; print(common.__file__)"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=30)
    assert where.stdout.strip().startswith(str(target)), where.stdout + where.stderr
    for command in ("broker", "rmproxy", "worker", "keys", "status", "check-config"):
        run = subprocess.run([sys.executable, "-c", "import sys, common.cli; sys.exit(common.cli.main(sys.argv[1:]))",
                              command, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0 and "usage: korral" in run.stdout, f"{command}: {run.stderr}"
