"""docs/ARCHITECTURE.md is the module map: every module of the packaged folders has its row.

The map has a section per folder (`### broker`, `### broker/log`, ...) whose table names modules
relative to that folder in its first column (`segment.py`, or several: `produce.py`, `fetch.py`).
A module is on the map when the deepest section containing it names it. Its paragraph "Not yet
strict" names the modules pyproject.toml exempts from mypy's strict flags, no more and no fewer.
"""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAP = ROOT / "docs" / "ARCHITECTURE.md"


def packaged_modules() -> list[str]:
    """Every module of the packaged folders (the odradek/ symlinks) and of odradek/ itself, as a
    path from the checkout root."""
    folders = sorted(p.name for p in (ROOT / "odradek").iterdir() if p.is_symlink())
    out = [f"odradek/{p.name}" for p in (ROOT / "odradek").glob("*.py") if p.name != "__init__.py"]
    for folder in folders:
        out += [p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*.py")
                if p.name != "__init__.py" and "__pycache__" not in p.parts]
    return sorted(out)


def mapped() -> dict[str, set[str]]:
    """Section folder → the module paths (relative to it) its table rows name."""
    sections: dict[str, set[str]] = {}
    current = None
    for line in MAP.read_text().splitlines():
        heading = re.match(r"^### (\S+)", line)
        if heading:
            current = heading.group(1).rstrip(":")
            sections.setdefault(current, set())
        elif current is not None and line.startswith("| "):
            first = line.split("|")[1]
            sections[current].update(re.findall(r"`([\w/]+\.py)`", first))
    return sections


def section_for(module: str, sections: dict[str, set[str]]) -> str | None:
    """The deepest section whose folder contains `module`."""
    parts = module.split("/")[:-1]
    for n in range(len(parts), 0, -1):
        if "/".join(parts[:n]) in sections:
            return "/".join(parts[:n])
    return None


def test_every_module_has_its_row():
    sections = mapped()
    missing = []
    for module in packaged_modules():
        section = section_for(module, sections)
        if section is None:
            folder = module.split("/")[0]
            missing.append(f"{module}: add a section `### {folder}` with a table "
                           f"`| module | Kafka | what |` and the row `| `{module.split('/', 1)[1]}` | ... | ... |`")
        elif module.removeprefix(section + "/") not in sections[section]:
            name = module.removeprefix(section + "/")
            missing.append(f"{module}: add the row `| `{name}` | <Kafka class, or (none: why)> | <what it does> |` "
                           f"to the table under `### {section}`")
    assert not missing, "docs/ARCHITECTURE.md leaves modules off the map:\n" + "\n".join(missing)


def test_each_module_has_one_row():
    rows: dict[str, int] = {}
    current = None
    for line in MAP.read_text().splitlines():
        heading = re.match(r"^### (\S+)", line)
        if heading:
            current = heading.group(1).rstrip(":")
        elif current is not None and line.startswith("| "):
            for name in re.findall(r"`([\w/]+\.py)`", line.split("|")[1]):
                rows[f"{current}/{name}"] = rows.get(f"{current}/{name}", 0) + 1
    twice = sorted(m for m, n in rows.items() if n > 1)
    assert not twice, f"docs/ARCHITECTURE.md has more than one row for {twice}: keep one"


def test_every_row_is_a_module():
    sections = mapped()
    modules = set(packaged_modules())
    stale = [f"{section}/{name}" for section, names in sections.items() for name in names
             if f"{section}/{name}" not in modules]
    assert not stale, f"docs/ARCHITECTURE.md names modules that do not exist (remove or rename their rows): {stale}"


def strict_exemptions() -> list[str]:
    """The modules pyproject.toml's mypy overrides turn the strict flags off for again, as paths
    from the checkout root (`odradek.broker.x` → `broker/x.py`)."""
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    assert any(o["module"] == ["odradek.*"] and o.get("disallow_untyped_defs") is True for o in overrides), \
        "pyproject.toml: the strict flags apply to `odradek.*`, every module"
    names = [m for o in overrides if o.get("disallow_untyped_defs") is False for m in o["module"]]
    paths = []
    for name in names:
        assert "*" not in name, f"pyproject.toml: name each module that is not yet strict, not {name!r}"
        parts = name.split(".")
        if len(parts) > 1 and (ROOT / "odradek" / parts[1]).is_symlink():
            parts = parts[1:]  # odradek.<folder>.x lives in <folder>/x.py
        path = ROOT.joinpath(*parts)
        paths.append((path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).relative_to(ROOT).as_posix())
    return sorted(paths)


def documented_exemptions() -> list[str]:
    """The modules the paragraph "Not yet strict" of the map names (none once it is gone)."""
    text = MAP.read_text()
    start = text.find("\nNot yet strict")
    if start < 0:
        return []
    paragraph = text[start : text.index("\n\n", start + 1)]
    return sorted(re.findall(r"`([\w/]+\.py)`", paragraph))


def test_the_map_names_the_modules_that_are_not_yet_strict():
    exempt, documented = strict_exemptions(), documented_exemptions()
    missing = [m for m in exempt if m not in documented]
    extra = [m for m in documented if m not in exempt]
    assert not missing and not extra, (
        "docs/ARCHITECTURE.md's paragraph \"Not yet strict\" and pyproject.toml's mypy exemptions differ: "
        f"add {missing} to the paragraph, take {extra} out of it (or put them back on pyproject.toml's list)")
    stale = [m for m in exempt if m not in packaged_modules()]
    assert not stale, f"pyproject.toml exempts modules that do not exist: {stale}"
