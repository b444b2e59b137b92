"""``mypy --strict`` errors in the modules pyproject.toml still lists as not strict, against the
count written beside each: exits 1 if a module has more than its count, or none left (strike
it from the list), so the list only shrinks.

    .venv/bin/python scripts/strict_types.py            # check
    .venv/bin/python scripts/strict_types.py --write    # lower the counts, strike the zeros

The other modules are strict already: ``mypy gpustats`` (run by .ci/run) fails on any error in
them. This runs mypy once more on a copy of the configuration without the relaxing override.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTED = re.compile(r'^\s+"(gpustats[\w.]*)",\s*#\s*(\d+)\s*$', re.M)


def listed(pyproject: str) -> dict[str, int]:
    """Module → its strict error count, as written in the relaxing override's list."""
    return {module: int(count) for module, count in LISTED.findall(pyproject)}


def strict_config(pyproject: str) -> str:
    """The ``[tool.mypy]`` settings with every override but the relaxing one, as an INI file."""
    mypy = tomllib.loads(pyproject)["tool"]["mypy"]
    lines = ["[mypy]"]
    for key, value in mypy.items():
        if key != "overrides":
            lines.append(f"{key} = {_ini(value)}")
    for override in mypy.get("overrides", ()):
        if override.get("disallow_untyped_defs") is False:
            continue
        modules = override["module"]
        lines.append(f"[mypy-{','.join(modules if isinstance(modules, list) else [modules])}]")
        lines += [f"{key} = {_ini(value)}" for key, value in override.items() if key != "module"]
    return "\n".join(lines) + "\n"


def _ini(value: object) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def counts(config: str) -> Counter[str]:
    """Errors per module under ``config``."""
    with tempfile.NamedTemporaryFile("w", suffix=".ini") as ini:
        ini.write(config)
        ini.flush()
        run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", ini.name,
                              "--cache-dir", str(ROOT / ".mypy_cache" / "strict")],
                             cwd=ROOT, capture_output=True, text=True)
    found: Counter[str] = Counter()
    for line in run.stdout.splitlines():
        path = line.split(":", 1)[0]
        if ": error:" in line and path.endswith((".py", ".pyi")):
            found[path.rsplit(".", 1)[0].replace("/", ".")] += 1
    return found


def lowered(pyproject: str, found: Counter[str]) -> str:
    """``pyproject`` with each listed count lowered to what was found (a module at 0 struck
    from the list, and the total beside it); a count that grew is left for a person to see."""
    def row(match: re.Match[str]) -> str:
        module, count = match.group(1), int(match.group(2))
        now = min(count, found[module])
        return f'    "{module}",{" " * (44 - len(module))}# {now}\n' if now else ""
    text = re.sub(r'^    "(gpustats[\w.]*)",\s*#\s*(\d+)\s*\n', row, pyproject, flags=re.M)
    return re.sub(r"\(\d+ in all\)", f"({sum(listed(text).values())} in all)", text)


def main() -> int:
    pyproject = (ROOT / "pyproject.toml").read_text()
    found = counts(strict_config(pyproject))
    if "--write" in sys.argv[1:]:
        pyproject = lowered(pyproject, found)
        (ROOT / "pyproject.toml").write_text(pyproject)
    allowed = listed(pyproject)
    problems = [f"{module}: {found[module]} strict errors, listed at {allowed.get(module, 0)}"
                for module in sorted(found) if found[module] > allowed.get(module, 0)]
    problems += [f"{module}: {found[module]} strict errors, listed at {count}: "
                 "lower its count (--write does), or strike it at 0"
                 for module, count in sorted(allowed.items()) if found[module] < count]
    print(f"mypy --strict: {sum(found.values())} errors in {len(found)} listed modules "
          f"(listed: {sum(allowed.values())} in {len(allowed)})")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
