"""Per-sample evaluation records: one JSON object per line, append-only.

A record is the unit every table and plot is built from, so it carries everything needed to
interpret it: the prompt id (task/split/index) and sample number, prompt, output ids and text,
reference answer, verdict, forwards by kind (prefill, step, commit; older records name step
"denoise", which no table reads), n_tokens, TPF, timings, block steps, the batch size the timings
were taken at, the decode config, the model (path, name, identity hash) and the code (git commit). Resumption keys on (model id, config id, prompt id, sample): rerunning a command skips
what the file already holds.

Model identity hashes orl.json and config.json contents plus each weight file's name, size and
mtime: cheap for multi-GB checkpoints and changed by any rewrite; a byte-identical copy made with a
new mtime counts as a different model (safe: it is just evaluated again).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

SCHEMA = 1
_HEAD = f'{{"schema": {SCHEMA}, '.encode()  # how every line RecordWriter writes starts
Key = tuple[str, str, str, int]
# what tables, plots and resumption read from every record: checked when a file is read, so a foreign or
# hand-edited line is named by file and line, not a bare KeyError ('model') from deep in a report
FIELDS = {"prompt_id": str, "task": str, "sample": int, "config_id": str, "model": dict, "decode": dict,
          "verdict": bool, "n_tokens": int, "forwards": dict, "timing": dict, "block_steps": list, "batch_size": int}


def _digest(payload: object) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def model_identity(directory: str | os.PathLike) -> dict:
    d = Path(directory).resolve()
    parts: dict[str, object] = {}
    for name in ("orl.json", "config.json"):
        if (d / name).exists():
            parts[name] = hashlib.sha256((d / name).read_bytes()).hexdigest()
    for f in sorted(d.glob("*.safetensors")):
        st = f.stat()
        parts[f.name] = [st.st_size, st.st_mtime_ns]
    if not any(name.endswith(".safetensors") for name in parts):
        raise FileNotFoundError(f"{d} holds no *.safetensors weights")
    return {"path": str(d), "name": d.name, "id": _digest(parts)}


def code_identity() -> dict:
    """git commit of the orl sources, and whether tracked files differ from it."""
    here = Path(__file__).parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    return {"git_commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


# Decode knobs added after the record id was defined, each with the value that reproduces what
# decoding did before the knob existed (a historical fact, not the knob's current default: records
# from before the fused commit are unfused). A knob at that value stays out of the id, so an eval
# file written before it existed still resumes and pools with new records. Add every new knob here.
SELF_DRAFT_LABELS = {"diffusion": "self-draft", "fused": "fused self-draft"}  # ARConfig.spec_draft -> label
LATER_KNOBS = {"fused_commit": False, "layout": "prompt_block", "confidence": "prob", "cfg_scale": 0.0,
               "full_sequence_cache": "none", "editing_threshold": 0.9, "max_post_steps": 16,
               "num_to_transfer": 1, "small_block_size": 8, "top_k": 0, "top_p": 1.0, "alg_temp": 0.0,
               "spec_tokens": 0, "spec_ngram": 2, "spec_draft": "lookup", "spec_groups": 0,  # ARConfig's (AR records)
               "stop": []}  # a tuple in a live config, a list once read back from JSON: compared as lists


# Knobs only one rule reads: under another rule they change nothing, so they stay out of the id
# (a block of 4 defaults to sub-blocks of 4, and an old threshold-rule file must still resume).
RULE_KNOBS = {"small_block_size": "fast_dllm_v2", "editing_threshold": "llada21", "max_post_steps": "llada21",
              "num_to_transfer": "llada21"}


def config_id(decode: dict, batch_size: int) -> str:
    """Everything that changes a sample's outcome or timing besides the model and the prompt."""
    decode = {k: list(v) if isinstance(v, tuple) else v for k, v in decode.items()}
    kept = {k: v for k, v in decode.items() if not (k in LATER_KNOBS and v == LATER_KNOBS[k])
            and not (k in RULE_KNOBS and decode.get("rule") != RULE_KNOBS[k])}
    return _digest({"decode": kept, "batch_size": batch_size})


def effective_decode(decode: dict) -> dict:
    """The settings config_id tells apart, every later knob shown: a knob the record predates at its historical
    value (LATER_KNOBS), a knob of another rule (RULE_KNOBS) left out, tuples as lists."""
    decode = {**LATER_KNOBS, **{k: list(v) if isinstance(v, tuple) else v for k, v in decode.items()}}
    return {k: v for k, v in decode.items() if not (k in RULE_KNOBS and decode.get("rule") != RULE_KNOBS[k])}


def decoder_label(decode: dict) -> str:
    """Name of a speed-quality curve: the decoder settings other than the swept threshold."""
    label = "AR" if decode["rule"] == "ar" else f"{decode['rule']} L{decode['block_len']}"
    if decode.get("spec_tokens"):  # the same tokens as plain AR, other forwards and timings: its own curve
        draft = decode.get("spec_draft", "lookup")
        label += (f" +lookup k{decode['spec_tokens']} n{decode['spec_ngram']}" if draft == "lookup"
                  else f" +{SELF_DRAFT_LABELS[draft]} k{decode['spec_tokens']}")
        label += f" g{decode['spec_groups']}" if decode.get("spec_groups") else ""
    if decode["residual"] != "off":
        label += f" +{decode['residual']}"
    if decode.get("stop"):  # other tokens and forwards than the same decoder without: its own curve
        label += " +stop"
    if decode.get("temperature", 0) > 0:  # a canvas decoder has a schedule (t_min, t_max) instead
        label += f" T{decode['temperature']:g}"
    if decode.get("variant"):  # set by separate_configs: settings the label above does not show
        label += f" [{decode['variant']}]"
    return label


def separate_configs(records: list[dict]) -> list[dict]:
    """Records of one model, curve label and threshold that were decoded with other settings the label does not
    show (--max-new-tokens, --confidence, top_k, the batch size...) would pool into one row, their repeats read as
    samples of one decoder (a fake pass@k): each such config gets those settings into its label instead."""
    curve = [(r["model"]["id"], decoder_label(r["decode"]), r["decode"].get("threshold")) for r in records]
    curves: dict[tuple, dict[str, dict]] = {}
    for key, r in zip(curve, records):
        # compared as config_id compares them: a record from before a knob existed is that knob at its old value
        curves.setdefault(key, {})[r["config_id"]] = {**effective_decode(r["decode"]), "batch_size": r.get("batch_size")}
    variant: dict[tuple, str] = {}
    for key, configs in curves.items():
        keys = sorted({k for d in configs.values() for k in d} - {"threshold", "seed"})
        differ = [k for k in keys if len({repr(d.get(k)) for d in configs.values()}) > 1]
        for cid, d in configs.items():  # configs that differ only in their sampling seed are samples of one decoder
            if differ:
                variant[key + (cid,)] = " ".join(f"{k}={d.get(k)}" for k in differ)
    return [{**r, "decode": {**r["decode"], "variant": v}} if (v := variant.get(key + (r["config_id"],))) else r
            for key, r in zip(curve, records)]


def latest_records(records: list[dict]) -> list[dict]:
    """A prompt evaluated again by the same model and decoder (another --max-new-tokens, say) counts once:
    its last record."""
    return list({(r["model"]["id"], decoder_label(r["decode"]), r["decode"].get("threshold"), r["prompt_id"],
                  r["decode"].get("seed", 0), r["sample"]): r for r in records}.values())


def record_key(r: dict) -> Key:
    return r["model"]["id"], r["config_id"], r["prompt_id"], r["sample"]


def group_value(r: dict, key: str) -> object:
    """Field lookup for metrics.summarize: the columns reports group by."""
    if key == "model":
        return r["model"]["name"]
    if key == "decoder":
        return decoder_label(r["decode"])
    if key == "threshold":
        return r["decode"]["threshold"]  # None for an AR decoder
    return r[key]


def compressed(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() == ".gz"


def check_out(path: str | os.PathLike) -> None:
    """Records are appended as plain text, which would make a gzip file unreadable: refused up front."""
    if compressed(path):
        raise ValueError(f"{path}: orl writes records as plain JSONL and reads .gz only; give --out a name "
                         "without .gz (compress the finished file)")
    if Path(path).exists() and not Path(path).is_file():  # /dev/null, a directory: failed later as "Invalid argument"
        raise ValueError(f"{path}: not a regular file; records are a file orl appends to and resumes from: give "
                         "--out a file path")


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, is_last_and_unterminated). A `.gz` file is read through gzip: the records
    committed under docs/ are kept compressed."""
    raw = path.read_bytes()
    if compressed(path):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError; a cut file an EOFError
            raise ValueError(f"{path}: not a gzip-compressed records file ({type(e).__name__}: {e})") from None
        if not raw:  # an empty .gz (a failed `gzip > f`) is not an empty run
            raise ValueError(f"{path}: not a gzip-compressed records file (empty)")
    try:
        data = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a records file (not UTF-8 text: {e})") from None
    lines = data.split("\n")
    for i, line in enumerate(lines):
        if line.strip():
            yield i + 1, line, i == len(lines) - 1 and not data.endswith("\n")


def read_records(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[dict]:
    """Records of one or more JSONL files, each sample (record_key) once. An unterminated last line (a run
    killed mid-write) is skipped; any other unreadable line is an error naming file and line."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"records file {p} does not exist")
        for lineno, line, partial in _lines(p):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                if partial:
                    continue
                raise ValueError(f"{p}:{lineno}: not a JSON record ({e})") from None
            if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
                schema = rec.get("schema") if isinstance(rec, dict) else None
                raise ValueError(f"{p}:{lineno}: record schema {schema!r}, this orl reads {SCHEMA}")
            bad = [k for k, kind in FIELDS.items() if type(rec.get(k)) is not kind]
            bad += [f"model.{k}" for k in ("name", "id")
                    if "model" not in bad and type(rec["model"].get(k)) is not str]
            if bad:
                want = ", ".join(f"{k}: {FIELDS.get(k, str).__name__}" for k in bad)
                raise ValueError(f"{p}:{lineno}: not an orl eval record: field(s) {', '.join(bad)} missing or of the "
                                 f"wrong type (expected {want})")
            out.append(rec)
    # one record per sample (its resumption key): a file given twice, a copy beside it, or two runs appending
    # the same sample would otherwise count it twice (n doubled, a pass@2 of one draw); the last one is kept
    return distinct_model_names(list({record_key(r): r for r in out}.values()))


def distinct_model_names(records: list[dict]) -> list[dict]:
    """Tables and plots group by model name, the checkpoint directory's name, so two different models
    with one name (`runs/a/stage1` and `runs/b/stage1`) would be merged into one row. Each such name
    becomes the shortest path suffix that tells its directories apart ("a/stage1"), with @id added where
    one directory held several models (weights rewritten, or a --dtype cast, between evals). Unique
    names are left as they are. A label depends on the records read together: `orl report a.jsonl`
    may say `stage1` where `orl report a.jsonl b.jsonl` says `a/stage1`."""
    paths_of: dict[str, dict[str, str]] = defaultdict(dict)  # name -> {model id: path}
    for r in records:
        m = r["model"]
        paths_of[m["name"]].setdefault(m["id"], m.get("path") or m["name"])
    label: dict[tuple[str, str], str] = {}  # (name, id): a copy elsewhere keeps its id under another name
    for name, paths in paths_of.items():
        if len(paths) < 2:
            continue
        dirs = sorted(set(paths.values()))
        suffix = {d: name for d in dirs}
        for k in range(2, 9):
            if len(set(suffix.values())) == len(dirs):
                break
            suffix = {d: "/".join(Path(d).parts[-k:]).lstrip("/") or name for d in dirs}
        crowded = {d for d, n in Counter(paths.values()).items() if n > 1}
        for i, d in paths.items():
            # the id's own suffix (a cast model's "-bfloat16") is kept: it is what tells the two apart
            label[name, i] = f"{suffix[d]}@{i[:8]}{i[16:]}" if d in crowded else suffix[d]
    if not label:
        return records
    out = []
    for r in records:
        new = label.get((r["model"]["name"], r["model"]["id"]))
        out.append({**r, "model": {**r["model"], "name": new}} if new else r)
    return out


class RecordWriter:
    """Appends records, flushing after each batch so that a kill loses at most the batch in flight.
    Opening drops an unterminated last line left by an earlier kill, so appends start on a fresh line;
    only after every complete line has read as a record and the unterminated one as the start of one
    (a kill cuts a line orl wrote): a file orl did not write is refused as it is, never shortened.
    The file is created by the first write: a run that fails before any record leaves nothing behind."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        check_out(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            read_records(self.path)  # raises, naming file and line, unless every complete line is a record
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):
                tail = data[data.rfind(b"\n") + 1:]
                if not (tail.startswith(_HEAD) or _HEAD.startswith(tail)):
                    raise ValueError(f"{self.path}: the last line is not a record cut short by a kill (it does not "
                                     f"start as orl writes records, {_HEAD.decode()!r}): not an orl records file; "
                                     "left as it is, give --out a new file")
                with open(self.path, "r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)
        self._f = None

    def write(self, records: list[dict]) -> None:
        if self._f is None:
            self._f = open(self.path, "a", encoding="utf-8")
        for r in records:
            self._f.write(json.dumps({"schema": SCHEMA, **r}, ensure_ascii=False) + "\n")
            self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            self._f.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
