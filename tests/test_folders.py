"""One list of packaged folders: the odradek/ symlinks. Every other list is checked against it.

A top-level folder of Python code is either linked as odradek/<folder> (packaged, linted once,
shipped in the image) or named in NOT_PACKAGED with why.
"""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

NOT_PACKAGED = {
    "tests": "the test suite, run from the checkout",
    "bench": "benchmark drivers, run from the checkout",
    "tools": "make lint's own checkers",
    "odradek": "the package itself (cli, the CLI tools and the symlinks)",
}


def linked() -> list[str]:
    """The folders the odradek/ symlinks name: the one list."""
    return sorted(p.name for p in (ROOT / "odradek").iterdir() if p.is_symlink())


def test_each_symlink_is_its_folder():
    assert linked()
    for name in linked():
        assert (ROOT / "odradek" / name).resolve() == ROOT / name, f"odradek/{name} must point to ../{name}"


def test_every_folder_of_python_code_is_linked_or_said_why_not():
    folders = {d.name for d in ROOT.iterdir() if d.is_dir() and not d.name.startswith(".") and any(d.glob("*.py"))}
    missing = sorted(folders - set(linked()) - set(NOT_PACKAGED))
    assert not missing, (f"link {missing} under odradek/ (ln -s ../NAME odradek/NAME) or name them in "
                         "NOT_PACKAGED in tests/test_folders.py with why")


def test_ruff_checks_each_file_once():
    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert sorted(ruff["extend-exclude"]) == [f"odradek/{name}" for name in linked()], (
        "pyproject.toml [tool.ruff] extend-exclude must list odradek/<folder> for every odradek/ symlink")


def test_the_image_builds_from_every_linked_folder():
    dockerfile = (ROOT / "Dockerfile").read_text().splitlines()
    copies_all = "COPY . ." in dockerfile
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    for name in [*linked(), "odradek"]:
        assert copies_all or f"COPY {name} {name}" in dockerfile, f"the Dockerfile does not copy {name}/"
        assert name not in ignored, f".dockerignore leaves {name}/ out of the image's build context"
