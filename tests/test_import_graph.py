"""The rooms of the house and their layering (docs/architecture.md): every product module belongs to
one room, and a module imports only from its own room or from a room on a lower floor, so no room
imports a room above it and no two rooms import each other. Imports inside functions count too.

Read from the source with `ast`, nothing imported: a violation fails with the module and the import."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("distrai", "miners", "validators", "neurons")

FLOORS: tuple[tuple[str, ...], ...] = (
    ("distrai",),  # the package itself (its version)
    ("chain", "codec", "store"),
    ("wire",),
    ("data",),
    ("train",),
    ("protocol",),
    ("node",),
    ("miners", "validators"),
    ("dashboard",),
    ("localnet",),
    ("cli", "neurons"),
)
"""Lowest first. Rooms on one floor import nothing from each other."""

CLI_MODULES = {"distrai.cli", "distrai.chain_cmd", "distrai.run_cmd"}
"""The loose modules at the top of `distrai/`: the `distrai` command and its subcommands."""

TOOLS = {"dashboard", "localnet", "cli"}
ROLE_NAMES = ("miners.adversary_names", "validators.leader_adversary_names")
"""The tools start miners and validators as processes (`neurons/`); of the roles they read only these
light modules of names."""

FLOOR = {room: floor for floor, rooms in enumerate(FLOORS) for room in rooms}


def room_of(module: str) -> str:
    """The room a dotted name belongs to: `distrai.x` is room x's when x is a room, else the
    package's own (an attribute of the package, or a loose module, which `violations` refuses)."""
    parts = module.split(".")
    if parts[0] != "distrai":
        return parts[0]
    if ".".join(parts[:2]) in CLI_MODULES:
        return "cli"
    return parts[1] if len(parts) > 1 and parts[1] in FLOOR else "distrai"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of every import anywhere in the module, relative ones resolved."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = package[: len(package) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            # `from distrai.node import linkcheck` may import a module: the name counts, not only its package
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return found


def product_files(root: Path) -> list[Path]:
    return sorted(path for top in PRODUCT if (root / top).is_dir() for path in (root / top).rglob("*.py"))


def violations(root: Path) -> list[str]:
    found = []
    for path in product_files(root):
        module = module_name(path, root)
        room = room_of(module)
        where = path.relative_to(root)
        if room == "distrai" and module != "distrai":
            found.append(f"{where}: {module} is in no room (move it into one, or name it in FLOORS)")
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in imported(tree, module, path.name == "__init__.py"):
            if name.split(".")[0] not in PRODUCT:
                continue
            target = room_of(name)
            if target != room and FLOOR[target] >= FLOOR[room]:
                side = "beside" if FLOOR[target] == FLOOR[room] else "above"
                found.append(
                    f"{where}:{line}: {module} (room {room}) imports {name} (room {target}, {side} it)"
                )
            elif room in TOOLS and target in ("miners", "validators") and not name.startswith(ROLE_NAMES):
                found.append(
                    f"{where}:{line}: {module} (a tool) imports {name}: tools read only {', '.join(ROLE_NAMES)}"
                )
    return found


def test_every_module_imports_only_its_own_room_or_rooms_below():
    found = violations(REPO)
    assert not found, "imports against the layering (docs/architecture.md):\n" + "\n".join(found)


def test_every_room_on_the_floors_exists():
    rooms = {room_of(module_name(path, REPO)) for path in product_files(REPO)}
    assert rooms == set(FLOOR)


def test_a_room_importing_upward_or_sideways_fails(tmp_path):
    """The check can fail: a fake tree whose protocol imports the node (lazily, inside a function),
    whose miners import the validators, whose local network imports a miner's behaviours, and with a
    loose module no room holds."""
    for folder in ("distrai/protocol", "distrai/node", "miners", "validators"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "distrai/__init__.py").write_text("")
    (tmp_path / "distrai/protocol/sync.py").write_text("def f():\n    from distrai.node.build import Node\n")
    (tmp_path / "distrai/node/build.py").write_text("from distrai.protocol import sync\n")
    (tmp_path / "miners/miner.py").write_text("import validators.checks\n")
    (tmp_path / "validators/checks.py").write_text("from . import miner_free\n")
    (tmp_path / "distrai/loose.py").write_text("")
    (tmp_path / "distrai/localnet").mkdir()
    (tmp_path / "distrai/localnet/command.py").write_text(
        "from miners.adversary_names import ADVERSARY_NAMES\nfrom miners.adversaries import ADVERSARIES\n"
    )
    found = violations(tmp_path)
    assert found == [
        "distrai/localnet/command.py:2: distrai.localnet.command (a tool) imports miners.adversaries.ADVERSARIES: "
        "tools read only miners.adversary_names, validators.leader_adversary_names",
        "distrai/loose.py: distrai.loose is in no room (move it into one, or name it in FLOORS)",
        "distrai/protocol/sync.py:2: distrai.protocol.sync (room protocol) imports distrai.node.build.Node "
        "(room node, above it)",
        "miners/miner.py:1: miners.miner (room miners) imports validators.checks (room validators, beside it)",
    ]


def module_cycles(root: Path) -> list[list[str]]:
    """The product's modules that import one another round a loop, each loop sorted, imports for
    annotations only (under `TYPE_CHECKING`) counted: such a loop holds two modules together that
    one concept should hold."""
    files = {module_name(path, root): path for path in product_files(root)}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        graph[module] = set()
        for _, name in imported(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            parts = name.split(".")
            target = next(
                (".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in files), None
            )
            if target is not None and target != module:
                graph[module].add(target)
    reach = {m: set() for m in graph}
    for module in graph:  # every module reachable from each (few hundred modules: a walk from each)
        todo = list(graph[module])
        while todo:
            nxt = todo.pop()
            if nxt not in reach[module]:
                reach[module].add(nxt)
                todo.extend(graph[nxt])
    loops = {tuple(sorted({module} | {m for m in reach[module] if module in reach[m]})) for module in graph}
    return sorted(list(loop) for loop in loops if len(loop) > 1)


def test_no_modules_import_each_other_round_a_loop():
    assert module_cycles(REPO) == []


def test_a_loop_through_an_annotation_only_import_is_found(tmp_path):
    (tmp_path / "validators").mkdir()
    (tmp_path / "validators/__init__.py").write_text("")
    (tmp_path / "validators/a.py").write_text("from validators.b import B\n")
    (tmp_path / "validators/b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from validators.a import A\n"
    )
    (tmp_path / "validators/c.py").write_text("from validators import a\n")
    assert module_cycles(tmp_path) == [["validators.a", "validators.b"]]


LONGEST_FUNCTION = 80
"""No function of the product is longer: each reads in one screen (docs/architecture.md)."""


def long_functions(root: Path) -> list[str]:
    """`path:line name (lines)` of every product function over `LONGEST_FUNCTION` lines."""
    found = []
    for path in product_files(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LONGEST_FUNCTION:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_product_function_is_longer_than_a_screen():
    assert long_functions(REPO) == []


def test_a_long_function_is_named(tmp_path):
    (tmp_path / "miners").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST_FUNCTION))
    (tmp_path / "miners/long.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert long_functions(tmp_path) == [f"miners/long.py:5 long ({LONGEST_FUNCTION + 1} lines)"]
