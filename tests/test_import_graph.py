"""The house's imports read one way: no module reaches itself again through the modules it
imports, at the top of the file, under TYPE_CHECKING or inside a function (a circle there is
two rooms that should be one, or one room that should be two)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engines", "tools", "chat", "webui", "api", "store", "library", "access", "harness", "bench")


def module_files() -> dict[str, Path]:
    files = {path.stem: path for path in ROOT.glob("*.py")}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imported_by(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project's modules that ``name`` imports anywhere in its file."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                # "from package import module" imports the module; "from module import name" the module.
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source)
    return (found & modules.keys()) - {name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each group of modules that import one another round in a circle (Tarjan's strongly
    connected components of more than one module)."""
    order: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        order[module] = lowest[module] = len(order)
        stack.append(module)
        for other in graph[module]:
            if other not in order:
                visit(other)
                lowest[module] = min(lowest[module], lowest[other])
            elif other in stack:
                lowest[module] = min(lowest[module], order[other])
        if lowest[module] == order[module]:
            group = []
            while (member := stack.pop()) != module:
                group.append(member)
            if group:
                found.append(sorted([module, *group]))

    for module in graph:
        if module not in order:
            visit(module)
    return found


def test_no_module_imports_itself_round_a_circle():
    modules = module_files()
    graph = {name: imported_by(name, path, modules) for name, path in modules.items()}
    assert "webui.chat_view" in graph["webui.handlers"]  # the graph is read at all
    assert circles(graph) == []


# The engines' rooms, each above those after it: a room imports only the rooms below it (and the
# modules at the top of engines/, which every room shares), so that a newcomer reads each one
# knowing only what lies under it.
ENGINE_ROOMS = ("engines.backends", "engines.prompt", "engines.model_files")


def room_of(module: str) -> str | None:
    return next((room for room in ENGINE_ROOMS if module == room or module.startswith(room + ".")), None)


def test_the_engines_rooms_import_only_the_rooms_below_them():
    modules = module_files()
    upward = sorted(f"{name} -> {other}" for name, path in modules.items() if room_of(name)
                    for other in imported_by(name, path, modules)
                    if room_of(other) and ENGINE_ROOMS.index(room_of(other)) < ENGINE_ROOMS.index(room_of(name)))
    assert "engines.model_files.model_args" in imported_by("engines.backends.base", modules["engines.backends.base"], modules)
    assert upward == []


def package_of(module: str) -> str:
    return module.split(".")[0]


def test_the_tools_stand_above_the_engines():
    """The tools (the agent loop, the MCP servers' clients, the catalog) use the engines; no module
    of engines/ imports tools, anywhere in its file: the inference layer knows nothing of tools."""
    modules = module_files()
    upward = sorted(f"{name} -> {other}" for name, path in modules.items() if package_of(name) == "engines"
                    for other in imported_by(name, path, modules) if package_of(other) == "tools")
    assert "engines.compaction" in imported_by("tools.agent_loop", modules["tools.agent_loop"], modules)  # tools are read at all
    assert upward == []


def test_a_circle_is_found_where_there_is_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of what ``path`` imports from outside the project, anywhere in its file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_chat_core_knows_nothing_of_the_page():
    """chat/ (a tab's conversation, its replies, approval, saving) is plain Python under the page:
    none of its modules imports Gradio or anything of webui/, anywhere in its file, so that it is
    read, run and tested without a browser, and the page is a shell over it."""
    modules = module_files()
    core = {name: path for name, path in modules.items() if package_of(name) == "chat"}
    page = sorted(f"{name} -> {other}" for name, path in core.items() for other in imported_by(name, path, modules) if package_of(other) == "webui")
    gradio = sorted(name for name, path in core.items() if "gradio" in third_party_imports(path))
    assert "chat.session" in imported_by("chat.reply", modules["chat.reply"], modules)  # the core is read at all
    assert "gradio" in third_party_imports(modules["webui.notices"])
    assert page == [] and gradio == []
