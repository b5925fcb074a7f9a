"""benchmarks/device_stage.py: files cut into pieces, carried one at a time, joined and verified."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import device_stage as ds  # noqa: E402


@pytest.fixture
def files(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    a, b, c = src / "model.gguf", src / "empty.json", src / "tokens.bin"
    a.write_bytes(bytes(range(256)) * 3 + b"tail")  # 772 bytes
    b.write_bytes(b"")
    c.write_bytes(b"0123456789" * 5)
    return [a, b, c]


def carry_all(stage: Path, store: Path, skip: tuple[str, ...] = ()) -> list[str]:
    left = []
    for piece in sorted(stage.iterdir()):
        if piece.name not in skip:
            left = ds.put(piece, store)
    return left


def test_split_put_join_round_trip(tmp_path, files):
    m = ds.split(files, tmp_path / "stage", 100)
    assert m["total_bytes"] == 822 and len(m["pieces"]) == 9  # ceil(822 / 100)
    assert [p["bytes"] for p in m["pieces"]] == [100] * 8 + [22]
    # every piece carries the whole manifest, so any one names the set
    assert json.loads((tmp_path / "stage" / "p03" / ds.MANIFEST).read_text()) == m
    assert carry_all(tmp_path / "stage", tmp_path / "store") == []
    out = ds.join(tmp_path / "store", tmp_path / "files")
    assert [p.name for p in out] == ["model.gguf", "empty.json", "tokens.bin"]
    for src, dst in zip(files, out):
        assert dst.read_bytes() == src.read_bytes()


def test_missing_piece_is_named_and_join_refuses(tmp_path, files):
    ds.split(files, tmp_path / "stage", 100)
    left = carry_all(tmp_path / "stage", tmp_path / "store", skip=("p04",))
    assert left == ["p04"]
    with pytest.raises(FileNotFoundError, match=r"lacks 1 of 9 pieces: \['p04'\]"):
        ds.join(tmp_path / "store", tmp_path / "files")
    assert not (tmp_path / "files").exists()


def test_corrupt_piece_is_refused_at_put_and_at_join(tmp_path, files):
    ds.split(files, tmp_path / "stage", 100)
    piece = tmp_path / "stage" / "p01" / "piece"
    good = piece.read_bytes()
    piece.write_bytes(b"x" + good[1:])
    with pytest.raises(ValueError, match="carried incompletely"):
        ds.put(tmp_path / "stage" / "p01", tmp_path / "store")
    piece.write_bytes(good)
    carry_all(tmp_path / "stage", tmp_path / "store")
    stored = tmp_path / "store" / "p02"
    stored.write_bytes(b"y" * stored.stat().st_size)  # same size, other bytes: only the hash sees it
    with pytest.raises(ValueError, match="p02 does not match its sha256"):
        ds.join(tmp_path / "store", tmp_path / "files")


def test_join_never_overwrites_a_foreign_file(tmp_path, files):
    ds.split(files, tmp_path / "stage", 300)
    carry_all(tmp_path / "stage", tmp_path / "store")
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "tokens.bin").write_bytes(b"someone else's")
    with pytest.raises(FileExistsError, match="tokens.bin exists with other contents"):
        ds.join(tmp_path / "store", tmp_path / "files")
    assert (tmp_path / "files" / "tokens.bin").read_bytes() == b"someone else's"
    assert not (tmp_path / "files" / "model.gguf").exists()  # refused before anything was written
    # an identical file is fine (a rerun of join)
    (tmp_path / "files" / "tokens.bin").write_bytes(files[2].read_bytes())
    assert len(ds.join(tmp_path / "store", tmp_path / "files")) == 3


def test_store_of_another_split_is_refused(tmp_path, files):
    ds.split(files, tmp_path / "one", 300)
    ds.split(files[:1], tmp_path / "two", 300)
    ds.put(tmp_path / "one" / "p00", tmp_path / "store")
    with pytest.raises(ValueError, match="pieces of another split"):
        ds.put(tmp_path / "two" / "p00", tmp_path / "store")


def test_split_input_checks(tmp_path, files):
    with pytest.raises(ValueError, match="share a name"):
        ds.split([files[0], files[0]], tmp_path / "s1", 100)
    with pytest.raises(FileNotFoundError, match="not a file"):
        ds.split([tmp_path / "nope"], tmp_path / "s2", 100)
    with pytest.raises(ValueError, match="positive"):
        ds.split(files, tmp_path / "s3", 0)
    (tmp_path / "s4").mkdir()
    (tmp_path / "s4" / "mine").write_text("keep")
    with pytest.raises(FileExistsError, match="not empty"):
        ds.split(files, tmp_path / "s4", 100)
    assert (tmp_path / "s4" / "mine").read_text() == "keep"


def test_cli_round_trip(tmp_path, files, capsys):
    assert ds.main(["split", *map(str, files), "--out", str(tmp_path / "st"), "--piece-mib", "0.0003"]) == 0
    pieces = sorted((tmp_path / "st").iterdir())
    assert len(pieces) == 3  # 0.0003 MiB = 314 bytes
    for p in pieces:
        assert ds.main(["put", str(p), "--store", str(tmp_path / "store")]) == 0
    assert "still missing: none" in capsys.readouterr().out
    assert ds.main(["join", "--store", str(tmp_path / "store"), "--to", str(tmp_path / "f")]) == 0
    assert (tmp_path / "f" / "model.gguf").read_bytes() == files[0].read_bytes()
    assert ds.main(["join", "--store", str(tmp_path / "nothing"), "--to", str(tmp_path / "g")]) == 1
