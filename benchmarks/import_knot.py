"""The module knot: leakbench modules that import each other, lazy imports included (issue 42).

Parses every module under `leakbench/` with `ast` (no import runs): every `import` and `from ... import`
statement counts, also those inside function bodies (lazy imports) and under `if TYPE_CHECKING:`.
`from leakbench.x import y` names the module `leakbench.x.y` when that is a module, else `leakbench.x`;
relative imports are resolved against the importing module; a package's `__init__.py` is its own module
(`leakbench.x`), and importing `leakbench.x.y` also names its parent packages only when written so.
Prints every strongly connected component of more than one module (size, members) and the size of the
largest one.

    python benchmarks/import_knot.py [ROOT]        # ROOT: a checkout (default: this one)
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path


def module_names(package: Path) -> dict[str, Path]:
    """Every module of the package under `package` (its folder), by dotted name."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The known modules that `module` (the file `path`) names in any import statement."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in known else base)
    return {name for name in found if name in known and name != module}


def graph(root: Path) -> dict[str, set[str]]:
    """The import graph of the `leakbench` package in the checkout `root`: module -> modules it imports."""
    modules = module_names(root / "leakbench")
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def components(edges: dict[str, set[str]]) -> Iterator[list[str]]:
    """Strongly connected components (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                yield sorted(members)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    if not (args.root / "leakbench").is_dir():
        print(f"import_knot: no leakbench/ under {args.root}", file=sys.stderr)
        return 2
    edges = graph(args.root)
    knots = sorted((c for c in components(edges) if len(c) > 1), key=lambda c: (-len(c), c))
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} import edges (lazy included)")
    for knot in knots:
        print(f"knot of {len(knot)}: {', '.join(knot)}")
    print(f"largest knot: {len(knots[0]) if knots else 0} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
