"""`make lint`'s clock rule: broker, controller and operator code reads the clock it is given.

A direct `time.time()`, `time.monotonic()` or `now_ms()` call in broker/, controller/ or operator/
is a clock nobody can move: tests then sleep, and session expiry, quotas, re-authentication and
certificate renewal cannot be tested on virtual time. Components take a `clock` (common/clock.py)
from whoever builds them; KafkaServer makes one and hands it down. Referring to `now_ms` (as a
default argument) is fine; calling it is not. Exits 1 and lists every call outside ALLOWED.

Usage: python tools/check_clock.py [ROOT]
"""

import ast
import sys
from pathlib import Path

FOLDERS = ("broker", "controller", "operator")
BANNED = {"time.time", "time.monotonic", "time.time_ns", "time.monotonic_ns", "now_ms"}
"""Call targets, as written or as imported (`from time import monotonic as m; m()` is time.monotonic)."""

ALLOWED: dict[str, str] = {}
"""Files (relative to the root) allowed their wall-clock calls, with why: none. The clock module
(common/clock.py) is outside the checked folders; an exception would need a line here saying why."""


def _imported_names(tree: ast.AST) -> dict[str, str]:
    """Local name → the banned target it stands for, from imports (`import time as t` → t.time)."""
    names: dict[str, str] = {"time": "time", "now_ms": "now_ms"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "time":
                    names[a.asname or "time"] = "time"
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if node.module == "time" and a.name in ("time", "monotonic", "time_ns", "monotonic_ns"):
                    names[a.asname or a.name] = f"time.{a.name}"
                elif a.name == "now_ms":
                    names[a.asname or a.name] = "now_ms"
    return names


def banned_calls(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, target) of every banned call in `source`."""
    tree = ast.parse(source, filename)
    names = _imported_names(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, target = node.func, None
        if isinstance(func, ast.Name):
            target = names.get(func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            module = names.get(func.value.id)
            if module == "time":
                target = f"time.{func.attr}"
            elif func.attr == "now_ms":
                target = "now_ms"
        if target in BANNED:
            out.append((node.lineno, target))
    return sorted(out)


def check(root: Path) -> list[str]:
    """Every offending call under the checked folders of `root`, as `path:line: message`."""
    problems = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in ALLOWED:
                continue
            for line, target in banned_calls(path.read_text(), rel):
                problems.append(f"{rel}:{line}: {target}() called directly; take a clock (common/clock.py) "
                                "from whoever builds this, as KafkaServer hands one down")
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    stale = [f for f in ALLOWED if not (root / f).exists() or not banned_calls((root / f).read_text(), f)]
    problems = check(root) + [f"{f}: on ALLOWED in tools/check_clock.py but calls no wall clock: remove it"
                              for f in stale]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
