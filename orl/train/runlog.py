"""The JSONL training log inside a run's output directory (`<out>/train.log.jsonl`); checkpoint
writes carry it into each new copy of the directory (orl.atomic_dir.RUN_FILES)."""
from __future__ import annotations

import json
from pathlib import Path

from orl.atomic_dir import RUN_FILES

LOG_NAME = RUN_FILES[0]


def open_log(out: Path, start: int, key: str) -> Path:
    """Path of the run's log, cut back to the rows of steps <= start (the checkpoint a run resumes
    from): steps after the last checkpoint were redone by the resumed run, and a log that holds them
    twice would plot and average them twice. key names the step counter ("step" or "update")."""
    path = out / LOG_NAME
    out.mkdir(parents=True, exist_ok=True)
    if path.exists():
        lines = path.read_text().splitlines()
        kept = [line for line in lines if line.strip() and json.loads(line).get(key, 0) <= start]
        if len(kept) != len(lines):
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            tmp.replace(path)
    return path
