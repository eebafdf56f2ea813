"""The two distributions built from this repository, as ``uv build`` makes them: the provider's wheel,
which every Airflow worker installs, holds the provider only (no sim/, testbed/, replay/ or demo; neither
matplotlib nor jsonpatch among its requirements); ``airflow-provider-fedsched-devtools`` holds exactly those
parts. Then the provider's wheel alone, unpacked and first on the path: Airflow's surfaces load without
the dev tools, and a ``fedsched`` verb that needs them says in one line what to install.

The wheels are built once for the module (a few seconds each, from uv's cache of hatchling).
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from airflow_provider_fedsched.cli import DEV_TOOL_VERBS, EXIT_BAD_INPUT
from airflow_provider_fedsched.cli._common import DEV_TOOLS_DISTRIBUTION
from airflow_provider_fedsched.get_provider_info import get_provider_info
from tests.test_architecture import DEV_TOOLS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "airflow_provider_fedsched"
DEV_ONLY_REQUIREMENTS = {"matplotlib", "jsonpatch", "jq"}


@dataclass(frozen=True)
class Wheel:
    path: Path
    files: list[str]
    """The package's files in the wheel, relative to the package folder (``sim/api.py``)."""
    requires: list[str]
    """The ``Requires-Dist`` names, lower case, without versions or markers."""


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    if not Path(uv).exists() and shutil.which(uv) is None:
        pytest.fail(f"uv not found ({uv}): `make install` puts it in .tools/bin")
    return uv


def _read(path: Path) -> Wheel:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
    files = sorted(n.removeprefix(f"{PACKAGE}/") for n in names if n.startswith(f"{PACKAGE}/"))
    requires = [canonicalize_name(Requirement(r).name) for r in metadata.get_all("Requires-Dist") or []]
    assert metadata["Name"] == path.name.split("-")[0].replace("_", "-"), metadata["Name"]
    return Wheel(path, files, requires)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Wheel]:
    built = {}
    for name, project in (("provider", ROOT), ("devtools", ROOT / "devtools")):
        out = tmp_path_factory.mktemp(name)
        result = subprocess.run(
            [_uv(), "build", "--wheel", "--out-dir", str(out), str(project)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        (path,) = out.glob("*.whl")
        built[name] = _read(path)
    return built


def _tree() -> list[str]:
    """The package's files in this checkout (what ``uv build`` may take), relative to the package."""
    return sorted(
        str(path.relative_to(ROOT / PACKAGE))
        for path in (ROOT / PACKAGE).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


def _dev_tool(file: str) -> bool:
    """Whether a file (relative to the package) belongs to a dev-tool part (``sim/api.py``, ``demo.py``)."""
    return f"{PACKAGE}.{file.split('/')[0].removesuffix('.py')}" in DEV_TOOLS


def test_the_provider_wheel_holds_the_provider_only(wheels: dict[str, Wheel]) -> None:
    provider = wheels["provider"]
    assert [f for f in provider.files if _dev_tool(f)] == []
    assert DEV_ONLY_REQUIREMENTS.isdisjoint(provider.requires), provider.requires
    # numpy stays: the engine's columnar snapshot index uses it.
    assert {"apache-airflow", "apache-airflow-providers-cncf-kubernetes", "numpy"} <= set(provider.requires)
    assert provider.files == [f for f in _tree() if not _dev_tool(f)]


def test_the_devtools_wheel_holds_the_dev_tools_and_what_only_they_need(wheels: dict[str, Wheel]) -> None:
    devtools = wheels["devtools"]
    # Exactly the dev-tool parts (their data files included), and not the package's __init__, which is the
    # provider's: the two wheels share the folder without sharing a file.
    assert devtools.files == [f for f in _tree() if _dev_tool(f)]
    assert {"sim/defaults.yaml", "sim/controllers/pod-stages.yaml", "demo.py"} <= set(devtools.files)
    assert set(devtools.requires) == {"airflow-provider-fedsched", *DEV_ONLY_REQUIREMENTS}


def _run_without_dev_tools(
    wheels: dict[str, Wheel], tmp_path: Path, args: list[str]
) -> subprocess.CompletedProcess[str]:
    """``args`` to this venv's Python, with the provider's wheel unpacked first on the path (the checkout's
    editable install comes after it, and the working folder is not the checkout)."""
    site = tmp_path / "site"
    if not site.exists():
        with zipfile.ZipFile(wheels["provider"].path) as archive:
            archive.extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )


def test_without_the_dev_tools_airflow_loads_the_provider(wheels: dict[str, Wheel], tmp_path: Path) -> None:
    info = get_provider_info()
    modules = sorted(
        {
            m
            for kind in ("operators", "hooks", "triggers")
            for entry in info[kind]
            for m in entry["python-modules"]
        }
        | {link.rsplit(".", 1)[0] for link in info["extra-links"]}
        | {plugin["plugin-class"].rsplit(".", 1)[0] for plugin in info["plugins"]}
        | {"airflow_provider_fedsched.get_provider_info", "airflow_provider_fedsched.cli"}
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n    importlib.import_module(name)\n"
        "import airflow_provider_fedsched as package\n"
        "print(package.__file__)\n"
        f"print(sorted(m for m in sys.modules if m.startswith('{PACKAGE}.') and m.split('.')[1] in "
        "('sim', 'testbed', 'replay', 'demo')))\n"
    )
    result = _run_without_dev_tools(wheels, tmp_path, ["-c", code])
    assert result.returncode == 0, result.stderr
    where, loaded = result.stdout.splitlines()[-2:]
    assert Path(where).is_relative_to(tmp_path / "site")  # the wheel's package, not the checkout's
    assert loaded == "[]"


@pytest.mark.parametrize(
    "argv",
    [
        ["sim", "up", "--state-dir", "state"],
        ["sim", "--help"],
        ["testbed", "status", "--state-dir", "state"],
        ["replay", "--scenario", "seed-3x20"],
        ["history", "export", "--out", "pods.csv"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_without_the_dev_tools_a_verb_that_needs_them_says_what_to_install(
    wheels: dict[str, Wheel], tmp_path: Path, argv: list[str]
) -> None:
    assert argv[0] in DEV_TOOL_VERBS | {"history"}
    result = _run_without_dev_tools(wheels, tmp_path, ["-m", f"{PACKAGE}.cli", *argv])
    assert (result.returncode, result.stdout) == (EXIT_BAD_INPUT, ""), result.stderr
    assert result.stderr == (
        f"fedsched {argv[0]}: error: the dev tools are not installed: pip install {DEV_TOOLS_DISTRIBUTION}\n"
    )
    assert not (tmp_path / "pods.csv").exists()


def test_without_the_dev_tools_the_help_lists_their_verbs_as_not_installed(
    wheels: dict[str, Wheel], tmp_path: Path
) -> None:
    result = _run_without_dev_tools(wheels, tmp_path, ["-m", f"{PACKAGE}.cli", "--help"])
    assert result.returncode == 0, result.stderr
    lines = " ".join(result.stdout.split())
    for verb in sorted(DEV_TOOL_VERBS):
        assert f"{verb} not installed (pip install {DEV_TOOLS_DISTRIBUTION})" in lines
    assert "place what-if" in lines
