"""The house's layout: which module may import which, and what results/ holds (issue 85, item 10)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("cli", "common", "solver", "llm", "sft", "rl", "eval", "bench", "studies")


def imported(path: Path) -> set[str]:
    """Every module `path` imports, at its top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_two_rl_loops_import_neither_each_other_nor_the_choice_above_them():
    """rl/loop.py chooses between LoRA RL and head RL; the loops share rl/run_files.py and know
    nothing of each other (head_loop imported rl.loop inside functions, and rl.loop head_loop)."""
    loops = {"rl.lora_loop": ROOT / "rl" / "lora_loop.py", "rl.head_loop": ROOT / "rl" / "head_loop.py"}
    for name, path in loops.items():
        others = set(loops) - {name} | {"rl.loop"}
        assert not imported(path) & others, name
        assert "rl.run_files" in imported(path), name
    assert not imported(ROOT / "rl" / "run_files.py") & (set(loops) | {"rl.loop"})
    assert set(loops) <= imported(ROOT / "rl" / "loop.py")


def test_results_hold_no_code_that_runs_the_product():
    """results/ keeps data, configs and READMEs: a benchmark or study that imports the product lives in
    bench/ or studies/, where it is code like the rest."""
    scripts = [path.relative_to(ROOT) for path in (ROOT / "results").rglob("*.py")
               if any(name.split(".")[0] in PRODUCT for name in imported(path))]
    assert scripts == []
