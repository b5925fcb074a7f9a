"""Files too large for one device call, moved in pieces (docs/RESULTS-gemma.md, "The GPU route").

A device call carries at most 64 MiB of working tree, and this repository's tracked files take about
35 of them, while gemma-3-270m's smallest form here is a 253 MB GGUF. So the files are cut here into
numbered pieces that each fit beside the tree, carried one per call into a folder of the warm device
machine, and joined there, every piece and every file checked against its sha256:

    python benchmarks/device_stage.py split --out .stage --piece-mib 26 GGUF CORPUS_DIR/corpus.json ...
    # one device call per piece, back to back while the machine stays warm:
    #   run(command="python3 benchmarks/device_stage.py put .stage/p00 --store /root/stage", carry=[".stage/p00"])
    python3 benchmarks/device_stage.py join --store /root/stage --to /root/files     # on the device

`split` writes .stage/pNN/ (one piece and a copy of the manifest in each, so any piece names the whole
set); `put` copies one piece into the store; `join` lists the pieces still missing, or rebuilds each
file under --to (atomically, never over a file it did not write) and verifies it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

MANIFEST = "stage.json"
BUF = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(BUF):
            h.update(chunk)
    return h.hexdigest()


def split(files: list[Path], out: Path, piece_bytes: int) -> dict:
    """The files as one byte stream cut into pieces of piece_bytes; returns the manifest."""
    if piece_bytes <= 0:
        raise ValueError(f"piece size must be positive, got {piece_bytes}")
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise ValueError(f"two files share a name ({names}): join writes them into one folder")
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"{f}: not a file")
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty: choose another --out or remove it yourself")
    total = sum(f.stat().st_size for f in files)
    n = max(1, -(-total // piece_bytes))
    pieces: list[dict] = []
    out.mkdir(parents=True, exist_ok=True)
    hashes = [hashlib.sha256() for _ in range(n)]
    sinks = [open(_piece_dir(out, i, n) / "piece", "wb") for i in range(n)]
    try:
        pos = 0
        for f in files:
            with open(f, "rb") as src:
                while chunk := src.read(BUF):
                    while chunk:
                        i, room = pos // piece_bytes, piece_bytes - pos % piece_bytes
                        part, chunk = chunk[:room], chunk[room:]
                        sinks[i].write(part)
                        hashes[i].update(part)
                        pos += len(part)
    finally:
        for s in sinks:
            s.close()
    for i in range(n):
        pieces.append({"name": _piece_name(i, n), "bytes": min(piece_bytes, total - i * piece_bytes),
                       "sha256": hashes[i].hexdigest()})
    manifest = {"piece_bytes": piece_bytes, "total_bytes": total, "pieces": pieces,
                "files": [{"name": f.name, "bytes": f.stat().st_size, "sha256": sha256_file(f)} for f in files]}
    for p in pieces:
        (out / p["name"] / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _piece_name(i: int, n: int) -> str:
    return f"p{i:0{max(2, len(str(n - 1)))}d}"


def _piece_dir(out: Path, i: int, n: int) -> Path:
    d = out / _piece_name(i, n)
    d.mkdir()
    return d


def put(piece_dir: Path, store: Path) -> list[str]:
    """Copies one piece (checked) into the store; returns the names of the pieces the store still lacks."""
    manifest = json.loads((piece_dir / MANIFEST).read_text())
    entry = next((p for p in manifest["pieces"] if p["name"] == piece_dir.name), None)
    if entry is None:
        raise ValueError(f"{piece_dir}: its manifest lists no piece named {piece_dir.name}")
    if sha256_file(piece_dir / "piece") != entry["sha256"]:
        raise ValueError(f"{piece_dir}/piece does not match its sha256: carried incompletely")
    store.mkdir(parents=True, exist_ok=True)
    _check_same_set(store, manifest)
    tmp = store / f".{entry['name']}.tmp"
    shutil.copyfile(piece_dir / "piece", tmp)
    os.replace(tmp, store / entry["name"])
    (store / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return missing(store, manifest)


def _check_same_set(store: Path, manifest: dict) -> None:
    old = store / MANIFEST
    if old.exists() and json.loads(old.read_text()) != manifest:
        raise ValueError(f"{store} holds pieces of another split (its {MANIFEST} differs): use another --store")


def missing(store: Path, manifest: dict) -> list[str]:
    return [p["name"] for p in manifest["pieces"]
            if not (store / p["name"]).is_file() or (store / p["name"]).stat().st_size != p["bytes"]]


def join(store: Path, to: Path) -> list[Path]:
    """Rebuilds every file of the split under `to`, each verified; refuses when a piece is missing."""
    manifest = json.loads((store / MANIFEST).read_text())
    lacking = missing(store, manifest)
    if lacking:
        raise FileNotFoundError(f"{store} lacks {len(lacking)} of {len(manifest['pieces'])} pieces: {lacking}")
    for p in manifest["pieces"]:
        if sha256_file(store / p["name"]) != p["sha256"]:
            raise ValueError(f"{store / p['name']} does not match its sha256")
    to.mkdir(parents=True, exist_ok=True)
    for f in manifest["files"]:
        target = to / f["name"]
        if target.exists() and not (target.is_file() and sha256_file(target) == f["sha256"]):
            raise FileExistsError(f"{target} exists with other contents: not overwritten")
    pieces = [store / p["name"] for p in manifest["pieces"]]
    reader = _Stream(pieces)
    written = []
    for f in manifest["files"]:
        target, tmp = to / f["name"], to / f".{f['name']}.tmp"
        with open(tmp, "wb") as dst:
            reader.copy(dst, f["bytes"])
        if sha256_file(tmp) != f["sha256"]:
            tmp.unlink()
            raise ValueError(f"{f['name']}: the joined file does not match its sha256")
        os.replace(tmp, target)
        written.append(target)
    return written


class _Stream:
    """The pieces read back to back as one stream."""

    def __init__(self, paths: list[Path]):
        self.paths, self.f = list(paths), None

    def copy(self, dst, n: int) -> None:
        while n:
            if self.f is None:
                self.f = open(self.paths.pop(0), "rb")
            chunk = self.f.read(min(n, BUF))
            if not chunk:
                self.f.close()
                self.f = None
                continue
            dst.write(chunk)
            n -= len(chunk)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split", help="cut files into numbered pieces under --out")
    s.add_argument("files", nargs="+", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--piece-mib", type=float, default=26.0)
    s = sub.add_parser("put", help="copy one carried piece into the store")
    s.add_argument("piece", type=Path)
    s.add_argument("--store", type=Path, required=True)
    s = sub.add_parser("join", help="rebuild and verify the files from a full store")
    s.add_argument("--store", type=Path, required=True)
    s.add_argument("--to", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "split":
            m = split(args.files, args.out, int(args.piece_mib * 2**20))
            print(f"{len(m['pieces'])} pieces of <= {args.piece_mib} MiB under {args.out}: "
                  + " ".join(p["name"] for p in m["pieces"]))
        elif args.cmd == "put":
            lacking = put(args.piece, args.store)
            print(f"stored {args.piece.name}; still missing: {' '.join(lacking) or 'none'}")
        else:
            for p in join(args.store, args.to):
                print(f"joined {p} ({p.stat().st_size} bytes, sha256 verified)")
    except (OSError, ValueError) as e:
        print(f"device_stage: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
