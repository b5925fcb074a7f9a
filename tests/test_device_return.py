"""benchmarks/device_return.py: a converted checkpoint packed on the device (its changed tensors, its small
files), cut into the pieces a device call brings back (device_stage.py), joined and rebuilt here from its
base - equal to the run's weights up to the delta's rounding, refused when the base or a piece differs."""
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import device_return as dr  # noqa: E402
import device_stage  # noqa: E402
from test_convert import base, smoke_cfg  # noqa: E402,F401 (base: the fixture)

from orl.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from orl.checkpoint_checks import CheckpointError  # noqa: E402
from orl.train import convert as cv  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def converted(base):
    """(base dir, run dir): test_convert's tiny AR base and 4 steps of the convert recipe with frozen (tied)
    embeddings."""
    cv.convert(replace(smoke_cfg(base), freeze_embeddings=True), base / "run_frozen", log=lambda *_: None)
    return base / "base", base / "run_frozen"


def _weights(d: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(d / "model.safetensors"), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def _through_pieces(src: Path, tmp: Path, piece_bytes: int) -> Path:
    """What the device calls do: split, each piece copied out, put into one store here, joined."""
    device_stage.split([src / dr.DELTA, src / dr.RETURN], tmp / "pieces", piece_bytes)
    for piece in sorted((tmp / "pieces").iterdir()):
        device_stage.put(piece, tmp / "store")
    device_stage.join(tmp / "store", tmp / "joined")
    return tmp / "joined"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pack_pieces_unpack_rebuilds_the_run(converted, tmp_path, dtype):
    base, run = converted
    rec = dr.pack(run, base, tmp_path / "ret", dtype)
    moved = {e["name"] for e in rec["tensors"] if e["from"] == "delta"}
    assert "model.embed_tokens.weight" not in moved and len(moved) == len(rec["tensors"]) - 1  # frozen: left out
    assert rec["left"] == ["trainer_state.pt"] and rec["files"]["config.json"]["from"] == "inline"
    assert all(rec["files"][n]["from"] == "base" for n in rec["files"] if n.startswith("orl_tokenizer"))
    joined = _through_pieces(tmp_path / "ret", tmp_path, 700)
    assert len(list((tmp_path / "pieces").iterdir())) > 3
    out = dr.unpack(joined, base, tmp_path / "back")
    model, tok, manifest = load_checkpoint(out)  # checksums, sizes and fields verified by the loader
    got, want = _weights(out), _weights(run)
    assert got.keys() == want.keys()
    for k, w in want.items():
        assert got[k].dtype == w.dtype
        expect = w if k not in moved or w.dim() < 2 else w.to(dr.DTYPES[dtype]).to(w.dtype)  # vectors kept exact
        assert torch.equal(got[k], expect), k
    assert dtype == "float32" or any(not torch.equal(got[k], want[k]) for k in moved)  # bf16 rounds: not a copy
    assert manifest["objective"] == "block_diffusion" and manifest["recipe"]["step"] == 4
    assert manifest["returned"]["delta_dtype"] == dtype and manifest["returned"]["left_on_device"] == ["trainer_state.pt"]
    assert not (out / "trainer_state.pt").exists()
    # the rebuilt model decodes as the run's does when the delta is exact
    if dtype == "float32":
        from orl.engine import DecodeConfig, Engine

        cfg = DecodeConfig(block_len=4, max_new_tokens=8)
        a = Engine(model, tok).generate_ids([[5, 6, 7]], cfg)[0]
        b = Engine(load_checkpoint(run)[0], tok).generate_ids([[5, 6, 7]], cfg)[0]
        assert a.token_ids == b.token_ids and a.step_forwards == b.step_forwards


def test_unpack_refuses_another_base_and_a_damaged_delta(converted, tmp_path):
    base, run = converted
    dr.pack(run, base, tmp_path / "ret", "bfloat16")
    # a base whose embedding differs in one value: the left-out tensor is not the device's
    other = tmp_path / "other"
    m, tok, _ = load_checkpoint(base)
    with torch.no_grad():
        m.model.embed_tokens.weight[3, 0] += 1.0
    save_checkpoint(m, tok, other, {"objective": "autoregressive"})
    with pytest.raises(CheckpointError, match="model.embed_tokens.weight.*not the tensor the device's base held"):
        dr.unpack(tmp_path / "ret", other, tmp_path / "back")
    assert not (tmp_path / "back").exists()
    # one byte of the delta changed: its sha256 stops the rebuild before anything is read
    data = bytearray((tmp_path / "ret" / dr.DELTA).read_bytes())
    data[-1] ^= 1
    (tmp_path / "ret" / dr.DELTA).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="a piece was damaged"):
        dr.unpack(tmp_path / "ret", base, tmp_path / "back")


def test_unpack_never_writes_over_a_directory_orl_did_not_write(converted, tmp_path):
    base, run = converted
    dr.pack(run, base, tmp_path / "ret", "bfloat16")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert dr.main(["unpack", str(tmp_path / "ret"), "--base", str(base), "--out", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    assert dr.main(["unpack", str(tmp_path / "ret"), "--base", str(base), "--out", str(base)]) == 2  # output = base
    # nor over an orl run: its trainer state would be lost to an inference-only checkpoint
    assert dr.main(["unpack", str(tmp_path / "ret"), "--base", str(base), "--out", str(run)]) == 2
    assert (run / "trainer_state.pt").exists()
    # pack never writes over an earlier pack
    assert dr.main(["pack", str(run), "--base", str(base), "--out", str(tmp_path / "ret")]) == 2


def test_an_unlisted_tensor_in_the_delta_is_refused(converted, tmp_path):
    base, run = converted
    rec = dr.pack(run, base, tmp_path / "ret", "float32")
    with safe_open(str(tmp_path / "ret" / dr.DELTA), framework="pt") as f:
        delta = {k: f.get_tensor(k) for k in f.keys()}
    delta["extra.weight"] = torch.zeros(2)
    save_file(delta, str(tmp_path / "ret" / dr.DELTA))
    from orl.atomic_dir import file_digest
    rec.update(delta_sha256=file_digest(tmp_path / "ret" / dr.DELTA),
               delta_bytes=(tmp_path / "ret" / dr.DELTA).stat().st_size)
    (tmp_path / "ret" / dr.RETURN).write_text(json.dumps(rec))
    with pytest.raises(CheckpointError, match="does not list: \\['extra.weight'\\]"):
        dr.unpack(tmp_path / "ret", base, tmp_path / "back")


@pytest.mark.parametrize("lie", ["path", "weights", "dtype", "missing_field"])
def test_a_record_that_lies_is_refused_before_anything_is_written(converted, tmp_path, lie):
    base, run = converted
    rec = dr.pack(run, base, tmp_path / "ret", "bfloat16")
    if lie == "path":  # a name that would write beside --out
        rec["files"]["../victim.txt"] = dict(rec["files"]["config.json"])
        match = "names a file '../victim.txt'"
    elif lie == "weights":  # an inline file that would replace the rebuilt weights
        rec["files"]["model.safetensors"] = dict(rec["files"]["config.json"])
        match = "names a file 'model.safetensors'"
    elif lie == "dtype":  # the left-out embedding claimed in another dtype than the base's
        next(e for e in rec["tensors"] if e["from"] == "base")["dtype"] = "bfloat16"
        match = "not the tensor the device's base held"
    else:
        del rec["tensors"][0]["dtype"]
        match = "malformed return record"
    (tmp_path / "ret" / dr.RETURN).write_text(json.dumps(rec))
    with pytest.raises(CheckpointError, match=match):
        dr.unpack(tmp_path / "ret", base, tmp_path / "out" / "back")
    assert not (tmp_path / "out" / "victim.txt").exists() and not (tmp_path / "out" / "back").exists()


def test_pack_refuses_a_damaged_run_file_and_leaves_no_partial_output(converted, tmp_path):
    base, run = converted
    copy = tmp_path / "run"
    import shutil
    shutil.copytree(run, copy)
    cfg = json.loads((copy / "config.json").read_text())
    cfg["note"] = "edited after the checkpoint was written"
    (copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="config.json does not match its sha256"):
        dr.pack(copy, base, tmp_path / "ret")
    assert not (tmp_path / "ret").exists() and not list(tmp_path.glob(".ret.tmp-*"))
    with pytest.raises(CheckpointError, match="not an orl checkpoint"):
        dr.pack(run, tmp_path, tmp_path / "ret2")  # a base without orl.json
