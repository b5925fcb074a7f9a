"""A converted checkpoint brought back from a lent GPU (docs/RESULTS-gemma.md, "Bringing the weights back").

A device call returns at most 64 MiB (8 files of 16 MiB each), while the converted gemma-3-270m is 1 GiB in fp32.
A conversion with frozen (tied) embeddings changes only the 100M parameters outside the embedding, so `pack`
writes those, cast to bf16 (191 MiB), with the run's small files, and names every tensor and file it leaves out
by the sha256 of the base's copy; device_stage.py cuts that into pieces the calls bring back; `unpack` rebuilds
the checkpoint here from the base the run started from and refuses when any left-out tensor or file is not
byte for byte the one the device saw. The trainer state (optimizer moments) stays behind: the result evaluates
and post-trains (ORL), it does not resume the conversion.

    # device, after the run (benchmarks/gpu_convert.sh does both when time is left):
    python3 benchmarks/device_return.py pack /root/gpu_convert/run --base /root/gpu_convert/base --out /root/ret
    python3 benchmarks/device_stage.py split /root/ret/delta.safetensors /root/ret/return.json --out /root/ret/p --piece-mib 15
    # device calls, four pieces each (8 files: piece + stage.json): cp -r /root/ret/p/p00 ... /root/ret/p/p03 $OUT/
    # here: every fetched piece into one store, join, rebuild
    python benchmarks/device_stage.py put /work/.device/N/p00 --store RET/store        # ... for each piece
    python benchmarks/device_stage.py join --store RET/store --to RET/delta
    python benchmarks/device_return.py unpack RET/delta --base ~/.cache/orl/gemma-3-270m --out runs/gemma-gpu
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orl.atomic_dir import MANIFEST, MARK, ORL_NAMES, check_apart, file_digest, write_atomically  # noqa: E402
from orl.checkpoint_checks import CheckpointError, read_json  # noqa: E402

RETURN = "return.json"
DELTA = "delta.safetensors"
FORMAT = 1
INLINE_MAX = 4 << 20  # bytes: a changed file larger than this (a new tokenizer) would not fit beside the weights
LEFT = ("trainer_state.pt",)  # optimizer moments: 2x the weights, only needed to resume the conversion
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def tensor_digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's dtype, shape and bytes (so equal digests mean identical tensors)."""
    t = t.contiguous()
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _weight_names(files: dict) -> list[str]:
    return sorted(n for n in files if n.endswith(".safetensors"))


def _tensors(d: Path, names: list[str]):
    """(name, tensor) of every tensor in d's weight files, in file order, read without unpickling."""
    for fname in names:
        with safe_open(str(d / fname), framework="pt") as f:
            for key in f.keys():
                yield key, f.get_tensor(key)


def _manifest(d: Path) -> dict:
    if not (d / MANIFEST).is_file():
        raise CheckpointError(f"{d} is not an orl checkpoint (no {MANIFEST}): pack and unpack take orl's own "
                              "directories (`orl fetch` / `orl import-gguf` for a base, a run's --out)")
    m = read_json(d / MANIFEST)
    if not isinstance(m.get("files"), dict) or not m["files"]:
        raise CheckpointError(f"{d / MANIFEST} lists no files: pack needs an orl checkpoint written by this version")
    return m


def pack(run: Path, base: Path, out: Path, dtype: str = "bfloat16") -> dict:
    """Write out/delta.safetensors (the run's tensors that differ from the base's, in `dtype`) and out/return.json;
    returns the latter."""
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    run_m, base_m = _manifest(run), _manifest(base)
    base_tensors = dict(_tensors(base, _weight_names(base_m["files"])))
    entries, delta = [], {}
    for name, t in _tensors(run, _weight_names(run_m["files"])):
        b = base_tensors.get(name)
        same = b is not None and b.dtype == t.dtype and b.shape == t.shape and torch.equal(b, t)
        kind = str(t.dtype).removeprefix("torch.")
        if kind not in DTYPES:  # quantized storage (int8, packed fp4) would not survive a float cast
            raise CheckpointError(f"{name} is {kind}: pack carries float tensors only ({', '.join(DTYPES)})")
        entries.append({"name": name, "dtype": kind, "shape": list(t.shape),
                        "from": "base" if same else "delta", **({"sha256": tensor_digest(t)} if same else {})})
        if not same:  # matrices rounded to `dtype`; vectors (norms, biases, fp32-by-design buffers) kept as they are
            delta[name] = (t.to(DTYPES[dtype]) if t.dim() >= 2 else t).contiguous()
    files = {}
    for name, digest in run_m["files"].items():
        if name.endswith(".safetensors") or name == "model.safetensors.index.json" or name in LEFT:
            continue
        if base_m["files"].get(name) == digest:
            files[name] = {"from": "base", "sha256": digest}
            continue
        size = (run / name).stat().st_size
        if size > INLINE_MAX:
            raise CheckpointError(f"{run / name} ({size / 2**20:.1f} MiB) differs from the base's and is too large to "
                                  f"carry inline (at most {INLINE_MAX >> 20} MiB)")
        data = (run / name).read_bytes()
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise CheckpointError(f"{run / name} does not match its sha256 in {run / MANIFEST}: the run is damaged")
        files[name] = {"from": "inline", "sha256": digest, "data": base64.b64encode(data).decode()}
    if out.exists():
        raise FileExistsError(f"{out} exists: pack writes a new directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    # written beside and renamed into place: a pack cut off by a deadline leaves no half-written `out`
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        save_file(delta, str(tmp / DELTA), metadata={"format": "pt"})
        record = {"format": FORMAT, "delta_dtype": dtype, "delta_sha256": file_digest(tmp / DELTA),
                  "delta_bytes": (tmp / DELTA).stat().st_size, "run": str(run), "run_manifest": run_m,
                  "base_files": base_m["files"], "tensors": entries, "files": files,
                  "left": sorted(n for n in run_m["files"] if n in LEFT)}
        (tmp / RETURN).write_text(json.dumps(record) + "\n")
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return record


def _read_record(d: Path) -> dict:
    path = d / RETURN
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist: give the directory device_stage.py joined")
    if path.stat().st_size > 64 << 20:  # bounded before reading: the record holds names and small files
        raise CheckpointError(f"{path} is {path.stat().st_size / 2**20:.0f} MiB: not a return record")
    rec = read_json(path)
    if rec.get("format") != FORMAT:
        raise CheckpointError(f"{path}: unsupported format {rec.get('format')!r} (expected {FORMAT})")
    size = (d / DELTA).stat().st_size if (d / DELTA).is_file() else None
    if size != rec["delta_bytes"]:
        raise CheckpointError(f"{d / DELTA}: {size} bytes, the record says {rec['delta_bytes']}")
    if file_digest(d / DELTA) != rec["delta_sha256"]:
        raise CheckpointError(f"{d / DELTA} does not match its sha256 in {path}: a piece was damaged")
    return rec


def unpack(d: Path, base: Path, out: Path) -> Path:
    """The checkpoint of the record in d, rebuilt from `base`, written atomically to `out`."""
    if Path(out).exists():  # a training run's directory would lose its trainer state to the rebuilt checkpoint
        raise FileExistsError(f"{out} exists: unpack writes a new directory")
    rec = _read_record(d)
    check_apart(out, base, "--base")
    try:
        return _rebuild(rec, d, base, out)
    except (KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{d / RETURN}: malformed return record ({type(e).__name__}: {e})") from None


def _rebuild(rec: dict, d: Path, base: Path, out: Path) -> Path:
    base_m = _manifest(base)
    base_tensors = dict(_tensors(base, _weight_names(base_m["files"])))
    with safe_open(str(d / DELTA), framework="pt") as f:
        delta = {k: f.get_tensor(k) for k in f.keys()}
    state = {}
    for e in rec["tensors"]:
        name, shape, dt = e["name"], list(e["shape"]), DTYPES.get(e["dtype"])
        if dt is None:
            raise CheckpointError(f"{name}: dtype {e['dtype']!r} is not one unpack rebuilds")
        t = base_tensors.get(name) if e["from"] == "base" else delta.pop(name, None)
        if t is None:
            raise CheckpointError(f"{name}: missing from the {'base ' + str(base) if e['from'] == 'base' else DELTA}")
        if list(t.shape) != shape:
            raise CheckpointError(f"{name}: shape {list(t.shape)}, the run's is {shape}")
        if e["from"] == "base" and (t.dtype != dt or tensor_digest(t) != e["sha256"]):
            raise CheckpointError(f"{name} in {base} is not the tensor the device's base held (sha256 differs): "
                                  "unpack with the base the run was converted from")
        state[name] = t.to(dt).contiguous()
    if delta:
        raise CheckpointError(f"{DELTA} holds tensors the record does not list: {sorted(delta)[:5]}")
    blobs = {}
    for name, info in rec["files"].items():
        # a plain file name orl writes, never the weights or the manifest this function writes itself
        if not ORL_NAMES.match(name) or name.endswith(".safetensors") or name in (MANIFEST, "model.safetensors.index.json"):
            raise CheckpointError(f"{d / RETURN} names a file {name!r} that a checkpoint does not carry")
        if info["from"] == "base":
            if base_m["files"].get(name) != info["sha256"] or file_digest(base / name) != info["sha256"]:
                raise CheckpointError(f"{base / name} is not the file the device's run held (sha256 differs)")
            blobs[name] = (base / name).read_bytes()
        else:
            blobs[name] = base64.b64decode(info["data"])
            if "sha256:" + hashlib.sha256(blobs[name]).hexdigest() != info["sha256"]:
                raise CheckpointError(f"{name}: inline copy does not match its sha256")
    manifest = dict(rec["run_manifest"])
    # why the numbers here can differ slightly from the device's: the changed tensors were rounded to delta_dtype
    manifest["returned"] = {"from": rec["run"], "delta_dtype": rec["delta_dtype"], "source_files": manifest["files"],
                            "left_on_device": rec["left"], "base": str(base)}

    def fill(tmp: Path) -> None:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for name, data in blobs.items():
            (tmp / name).write_bytes(data)
        manifest["files"] = {p.name: file_digest(p) for p in sorted(tmp.iterdir()) if p.name != MARK}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")  # last: a copy with one is complete

    return write_atomically(out, fill)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("pack", help="on the device: the run's changed tensors and small files")
    s.add_argument("run", type=Path)
    s.add_argument("--base", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    s = sub.add_parser("unpack", help="here: rebuild the checkpoint from its base")
    s.add_argument("delta", type=Path)
    s.add_argument("--base", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "pack":
            rec = pack(a.run, a.base, a.out, a.dtype)
            n = sum(e["from"] == "delta" for e in rec["tensors"])
            print(f"packed {n} of {len(rec['tensors'])} tensors ({rec['delta_bytes'] / 2**20:.1f} MiB, {a.dtype}) "
                  f"into {a.out}; left on the device: {', '.join(rec['left']) or 'nothing'}")
        else:
            print(f"rebuilt {unpack(a.delta, a.base, a.out)}")
    except (CheckpointError, FileExistsError, ValueError, OSError) as e:
        print(f"device_return {a.cmd}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
