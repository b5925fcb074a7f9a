"""Tasks of the user's own, registered for one run: Python modules exposing Task subclasses
(`--task-module my_tasks.py`) and JSONL data files (`--tasks-file qa.jsonl`, tasks/datafile.py).

A module is a file path or an importable dotted name. Its tasks are the instances listed in a
module-level `TASKS` when it defines one (for knobs: `TASKS = [Count(n=9)]`), else every Task subclass
defined in the module that sets a `name`, each built with no arguments. Registered tasks go into
the registry (`orl.eval.tasks.TASKS`) under their `name`, so every place that takes task names takes
them: `orl eval --tasks`, ORLConfig.tasks, the pretraining config. A name of a built-in family is
refused (a name fixes a family's prompts, and the shipped checkpoints are bound to the built-in
ones); registering a name again in the same process (tests, notebooks) replaces the earlier one.

Rewards: `reward_of` asks a task's `reward(prompt, output)` (Task's default: 1.0 iff verify) and
refuses anything outside [0, 1], naming the task.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import sys
from collections.abc import Iterable
from pathlib import Path

from . import TASKS
from .base import Task
from .datafile import NAME, load_data_task

BUILTIN = frozenset(TASKS) | {"all", "humaneval"}  # "all" and humaneval mean something to `orl eval`
_SOURCES: dict[str, str] = {}                       # registered custom task -> where it came from


def import_module(spec: str):
    """A module from a file path (anything ending in .py, or an existing file) or a dotted name."""
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ValueError(f"--task-module {spec}: no such file")
        path = path.resolve()
        # a private, stable module name: two files called tasks.py do not replace each other
        name = f"orl_user_tasks.{path.stem}_{hashlib.blake2b(str(path).encode(), digest_size=4).hexdigest()}"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module  # dataclasses and pickling look classes up here
        try:
            loader_spec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(name, None)
            raise ValueError(f"--task-module {spec}: importing it failed: {type(e).__name__}: {e}") from e
        return module
    try:
        return importlib.import_module(spec)
    except ImportError as e:
        raise ValueError(f"--task-module {spec}: not a file and not an importable module ({e})") from e


def module_tasks(spec: str) -> list[Task]:
    module = import_module(spec)
    listed = getattr(module, "TASKS", None)
    if listed is not None and listed is not TASKS:  # `from orl.eval.tasks import TASKS` is the registry
        tasks = list(listed.values()) if isinstance(listed, dict) else list(listed)
        if not all(isinstance(t, Task) for t in tasks):
            raise ValueError(f"--task-module {spec}: TASKS must hold Task instances, got "
                             f"{sorted({type(t).__name__ for t in tasks if not isinstance(t, Task)})}")
    else:
        classes = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, Task)
                   and c.__module__ == module.__name__ and isinstance(getattr(c, "name", None), str)]
        tasks = []
        for cls in classes:
            try:
                tasks.append(cls())
            except TypeError as e:
                raise ValueError(f"--task-module {spec}: cannot build {cls.__name__}() ({e}); give its knobs "
                                 "defaults, or list configured instances in a module-level TASKS") from None
    if not tasks:
        raise ValueError(f"--task-module {spec}: defines no Task subclass with a `name` (and no TASKS list)")
    return tasks


def register(tasks: Iterable[Task], source: str) -> list[str]:
    names = []
    for task in tasks:
        name = getattr(task, "name", None)
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"{source}: task name {name!r} must be letters, digits, '_', '-' or '.'")
        if name in BUILTIN:
            raise ValueError(f"{source}: task name {name!r} is taken by the built-in task {name!r}; "
                             "rename yours (`orl tasks` lists the built-in names)")
        if name in names:
            raise ValueError(f"{source}: defines task {name!r} twice")
        names.append(name)
    for task in tasks:
        TASKS[task.name] = task
        _SOURCES[task.name] = source
    return names


def load_tasks(modules: Iterable[str] = (), files: Iterable[str] = ()) -> list[str]:
    """Load and register every module's and file's tasks; their names in order. Two sources of one
    run may not define the same name."""
    loaded: list[tuple[str, list[Task]]] = [(f"--task-module {m}", module_tasks(m)) for m in modules]
    loaded += [(f"--tasks-file {f}", [load_data_task(f)]) for f in files]
    origin: dict[str, str] = {}
    for source, tasks in loaded:
        for t in tasks:
            if t.name in origin:
                raise ValueError(f"task {t.name!r} is defined by both {origin[t.name]} and {source}")
            origin[t.name] = source
    return [name for source, tasks in loaded for name in register(tasks, source)]


def is_custom(name: str) -> bool:
    return name in _SOURCES


def source_of(name: str) -> str | None:
    return _SOURCES.get(name)


def reward_of(task: Task, prompt: str, output: str) -> float:
    """The task's reward for an output, checked to be a number in [0, 1]."""
    value = task.reward(prompt, output)
    if isinstance(value, bool):
        return float(value)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"task {task.name!r}: reward() returned {value!r}, not a number in [0, 1]") from None
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"task {task.name!r}: reward() returned {value}, outside [0, 1]")
    return value
