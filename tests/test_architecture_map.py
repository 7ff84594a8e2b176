"""docs/ARCHITECTURE.md is the module map: every module of the packaged folders has its row.

The map has a section per folder (`### broker`, `### broker/log`, ...) whose table names modules
relative to that folder in its first column (`segment.py`, or several: `produce.py`, `fetch.py`).
A module is on the map when the deepest section containing it names it.
"""

import re
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
