"""Checkpoint safety (issue 16 items 1-4, 6, 8): orl never replaces what it did not write, a crash at
any point of a write is recovered, a planted pickle is refused, forged sizes fail before anything is
built, damaged or non-finite weights are refused with the file or tensor named."""
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from orl.atomic_dir import file_digest, read_manifest, recover
from orl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from orl.engine import DecodeConfig, Engine
from orl.model import ModelArgs, Transformer
from orl.model.kv_cache import CacheBudgetError
from orl.tokenizer import CharTokenizer
from orl.train.loop import TRAIN_STATE, ResumeError, load_train_state, train_state_bytes

TOK = CharTokenizer()
ROOT = Path(__file__).resolve().parents[1]


def model(seed=0, **kw) -> Transformer:
    torch.manual_seed(seed)
    args = dict(vocab_size=TOK.vocab_size, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=48,
                max_seq_len=64)
    return Transformer(ModelArgs(**{**args, **kw})).eval()


def edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def rerecord(d: Path, name: str) -> None:
    edit_json(d / "orl.json", lambda m: m["files"].__setitem__(name, file_digest(d / name)))


# ---------------------------------------------------------------- never delete what orl did not write

def test_save_refuses_a_directory_with_a_config_json_and_other_files(tmp_path):
    victim = tmp_path / "victim"
    (victim / "src").mkdir(parents=True)
    (victim / "config.json").write_text("{}")
    (victim / "src" / "main.py").write_text("x")
    with pytest.raises(CheckpointError, match=r"entries orl did not write \(config.json, src\)"):
        save_checkpoint(model(), TOK, victim)
    assert (victim / "src" / "main.py").read_text() == "x"


def test_save_refuses_an_orl_checkpoint_a_user_added_files_to(tmp_path):
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    (d / "NOTES.md").write_text("mine")
    with pytest.raises(CheckpointError, match=r"NOTES.md"):
        save_checkpoint(model(1), TOK, d)
    assert (d / "NOTES.md").read_text() == "mine"
    load_checkpoint(d)  # extra files do not stop a load


def test_train_cli_refuses_the_issue_repro_before_any_step(tmp_path):
    victim = tmp_path / "victim"
    (victim / "src").mkdir(parents=True)
    (victim / "config.json").write_text("{}")
    (victim / "src" / "main.py").write_text("x")
    r = subprocess.run([sys.executable, "-m", "orl.cli", "train", "--recipe", "pretrain", "--preset", "smoke",
                        "--out", str(victim), "--set", "threads=1", "--set", "ar_steps=3", "--set", "diffusion_steps=0",
                        "--set", "save_every=3", "--set", "eval_samples=1"], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 2 and "refusing to replace" in r.stderr and "Traceback" not in r.stderr
    assert (victim / "src" / "main.py").read_text() == "x"
    assert not (tmp_path / "victim" / "train.log.jsonl").exists()  # refused before the run started


def test_export_refuses_a_foreign_directory(tmp_path):
    from orl.export import export_hf

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "config.json").write_text("{}")
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="refusing to replace"):
        export_hf(model(qk_norm=True), TOK, tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").exists()


def test_export_twice_into_the_same_directory(tmp_path):
    from orl.export import export_hf

    export_hf(model(qk_norm=True), TOK, tmp_path / "hf")
    out = export_hf(model(1, qk_norm=True), TOK, tmp_path / "hf")  # its own earlier export may be replaced
    assert "generation_config.json" in json.loads((out / "orl.json").read_text())["files"]


# ---------------------------------------------------------------- crash windows

KILL_AT_RENAME = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    import torch
    sys.path.insert(0, {tests!r})
    from test_checkpoint_safety import model, TOK
    from orl.checkpoint import save_checkpoint
    real, n = os.rename, [0]
    def rename(a, b):
        n[0] += 1
        if n[0] == {kill_at}:
            os._exit(9)  # as kill -9: no cleanup runs
        real(a, b)
    os.rename = rename
    save_checkpoint(model(1), TOK, Path({target!r}))
""")


def run_killed(target: Path, kill_at: int) -> None:
    code = KILL_AT_RENAME.format(tests=str(ROOT / "tests"), kill_at=kill_at, target=str(target))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 9, r.stderr


@pytest.mark.parametrize("kill_at", [1, 2])
def test_a_kill_during_the_swap_is_recovered(tmp_path, kill_at):
    """kill_at 1: before the old copy moves aside (old survives); 2: between the two renames, when no
    target exists at all: recovery installs the new copy, which was complete."""
    target = tmp_path / "ck"
    save_checkpoint(model(0), TOK, target)
    run_killed(target, kill_at)
    if kill_at == 2:
        assert not target.exists()
    recover(target)
    loaded = load_checkpoint(target)[0]
    want = model(1) if kill_at == 2 else model(0)
    assert torch.equal(loaded.lm_head.weight, want.lm_head.weight)
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]  # hidden copies cleaned


def test_stale_temporary_copies_are_cleaned_and_foreign_ones_kept(tmp_path):
    from orl.atomic_dir import MARK

    target = tmp_path / "ck"
    partial = tmp_path / ".ck.tmp-dead1234"  # a copy a killed write left: orl's name and mark
    partial.mkdir()
    (partial / MARK).write_text(json.dumps({"target": "ck"}))
    (partial / "model.safetensors").write_bytes(b"half")
    odd = tmp_path / ".ck.tmp-user1234"
    odd.mkdir()
    (odd / "diary.txt").write_text("mine")
    save_checkpoint(model(), TOK, target)
    assert not partial.exists() and (odd / "diary.txt").exists()
    assert MARK not in {p.name for p in target.iterdir()} and MARK not in read_manifest(target)["files"]


@pytest.mark.parametrize("name", [".ck.old-backup", ".ck.old-1a2b3c4d", ".ck.tmp-abcd1234"])
def test_a_users_hidden_copy_of_a_checkpoint_is_never_moved_or_deleted(tmp_path, name):
    """A user's backup named like orl's swap copies, holding only orl's file names (a real checkpoint),
    has no mark: neither a write next to it nor a recovery may delete it or move it into place."""
    backup = save_checkpoint(model(0), TOK, tmp_path / "somewhere")
    os.rename(backup, tmp_path / name)
    recover(tmp_path / "ck")
    assert not (tmp_path / "ck").exists()  # not moved into place
    save_checkpoint(model(1), TOK, tmp_path / "ck")
    assert (tmp_path / name / "model.safetensors").exists()  # not deleted
    assert torch.equal(load_checkpoint(tmp_path / name)[0].lm_head.weight, model(0).lm_head.weight)


# ---------------------------------------------------------------- trainer state: never unpickled

class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {PWNED}",))


PWNED = "/tmp/orl-test-pwned"


def test_a_planted_pickle_in_the_trainer_state_is_refused(tmp_path):
    d = save_checkpoint(model(), TOK, tmp_path / "run", extra_files={TRAIN_STATE: train_state_bytes({"step": 1})})
    assert load_train_state(d)["step"] == 1
    Path(PWNED).unlink(missing_ok=True)
    import io
    buf = io.BytesIO()
    torch.save({"step": 1, "evil": Payload()}, buf, pickle_protocol=2)
    (d / TRAIN_STATE).write_bytes(buf.getvalue())
    rerecord(d, TRAIN_STATE)
    with pytest.raises(CheckpointError, match="refusing to unpickle"):
        load_train_state(d)
    assert not Path(PWNED).exists()


def test_a_changed_trainer_state_fails_its_checksum(tmp_path):
    d = save_checkpoint(model(), TOK, tmp_path / "run", extra_files={TRAIN_STATE: train_state_bytes({"step": 1})})
    (d / TRAIN_STATE).write_bytes(train_state_bytes({"step": 7}))
    with pytest.raises(CheckpointError, match="trainer_state.pt: checksum mismatch"):
        load_train_state(d)


# ---------------------------------------------------------------- sizes before allocation

def test_forged_layer_count_fails_before_the_model_is_built(tmp_path, monkeypatch):
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    edit_json(d / "orl.json", lambda m: m["model_args"].__setitem__("n_layers", 1_000_000))
    edit_json(d / "config.json", lambda c: c.__setitem__("num_hidden_layers", 1_000_000))
    rerecord(d, "config.json")
    import orl.checkpoint as ck

    monkeypatch.setattr(ck, "Transformer", lambda *a: pytest.fail("built before the sizes were checked"))
    with pytest.raises(CheckpointError, match="n_layers is 1000000 but the weights hold 2 layer"):
        load_checkpoint(d)


def test_huge_max_seq_len_allocates_only_the_request_and_a_cache_of_it_is_refused(tmp_path):
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    for path, key in ((d / "orl.json", None), (d / "config.json", "max_position_embeddings")):
        edit_json(path, (lambda m: m["model_args"].__setitem__("max_seq_len", 10**11)) if key is None
                  else (lambda c, k=key: c.__setitem__(k, 10**11)))
    rerecord(d, "config.json")
    m, tok, _ = load_checkpoint(d)  # RoPE has no table: loading is cheap
    eng = Engine(m, tok)  # the engine sizes its cache to the request (2 + 4 slots -> 64), not max_seq_len
    assert eng.generate("ab", DecodeConfig(block_len=4, max_new_tokens=4))[0].token_ids
    assert [st.cache.max_len for st in eng._states.values()] == [64]
    with pytest.raises(CacheBudgetError, match=r"KV cache of 100000000000 positions .* over the 32 GiB budget"):
        m.new_cache(1, m.args.max_seq_len)


# ---------------------------------------------------------------- integrity

def test_a_flipped_byte_is_refused_with_the_file_named(tmp_path):
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    raw = bytearray((d / "model.safetensors").read_bytes())
    raw[-3] ^= 0x7F  # a weight byte: the header still parses
    (d / "model.safetensors").write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="model.safetensors: checksum mismatch"):
        load_checkpoint(d)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_with_the_tensor_named(tmp_path, bad):
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    t = load_file(d / "model.safetensors")
    t["model.layers.1.mlp.down_proj.weight"].fill_(bad)
    save_file(t, d / "model.safetensors", metadata={"format": "pt"})
    rerecord(d, "model.safetensors")
    with pytest.raises(CheckpointError, match=r"non-finite values \(inf or nan\) in model.layers.1.mlp.down_proj"):
        load_checkpoint(d)


@pytest.mark.parametrize("bad", [[float("nan")], [float("inf")], [float("-inf")], [float("inf"), float("-inf")]])
def test_one_non_finite_element_is_refused_with_the_tensor_named(tmp_path, bad):
    """The cheap check (one sum per tensor) still catches a single bad element among finite ones,
    and inf and -inf together (their sum is nan)."""
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    t = load_file(d / "model.safetensors")
    t["model.layers.0.self_attn.o_proj.weight"].view(-1)[3: 3 + len(bad)] = torch.tensor(bad)
    save_file(t, d / "model.safetensors", metadata={"format": "pt"})
    rerecord(d, "model.safetensors")
    name = "model.layers.0.self_attn.o_proj.weight"
    with pytest.raises(CheckpointError, match=rf"non-finite values \(inf or nan\) in {name}$"):
        load_checkpoint(d)


def test_finite_weights_whose_sum_overflows_still_load(tmp_path):
    """Huge finite values overflow the fp32 sum to inf: the exact per-element scan then clears them."""
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    t = load_file(d / "model.safetensors")
    t["model.layers.0.self_attn.o_proj.weight"].view(-1)[:2] = 3e38
    save_file(t, d / "model.safetensors", metadata={"format": "pt"})
    rerecord(d, "model.safetensors")
    m, _, _ = load_checkpoint(d)
    assert torch.equal(m.model.layers[0].self_attn.o_proj.weight.view(-1)[:2], torch.full((2,), 3e38))


# ---------------------------------------------------------------- hostile files

def test_hostile_files_get_named_errors(tmp_path):
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    with pytest.raises(CheckpointError, match="is a file; give the checkpoint directory"):
        load_checkpoint(d / "model.safetensors")
    (d / "orl.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="orl.json must hold a JSON object, got a list"):
        load_checkpoint(d)


def test_garbage_tokenizer_names_the_file(tmp_path):
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    (d / "orl_tokenizer.json").write_bytes(b"\xff\xfe garbage")
    rerecord(d, "orl_tokenizer.json")
    with pytest.raises(CheckpointError, match="orl_tokenizer.json"):
        load_checkpoint(d)


def test_index_entries_outside_the_directory_are_refused(tmp_path):
    d = save_checkpoint(model(), TOK, tmp_path / "ck", max_shard_bytes=20_000)
    first = sorted(d.glob("model-00001-of-*.safetensors"))[0].name
    (tmp_path / "elsewhere.safetensors").write_bytes((d / first).read_bytes())
    edit_json(d / "model.safetensors.index.json",
              lambda ix: ix["weight_map"].update({k: "../elsewhere.safetensors" for k, v in ix["weight_map"].items()
                                                  if v == first}))
    rerecord(d, "model.safetensors.index.json")
    with pytest.raises(CheckpointError, match="points outside the checkpoint directory"):
        load_checkpoint(d)


def test_config_json_and_manifest_disagreeing_is_detected(tmp_path):
    d = save_checkpoint(model(), TOK, tmp_path / "ck")
    edit_json(d / "config.json", lambda c: c.__setitem__("hidden_size", 64))
    rerecord(d, "config.json")
    with pytest.raises(CheckpointError, match=r"(?s)config.json and orl.json disagree .*hidden_size: config.json 64, orl.json 32"):
        load_checkpoint(d)


def test_a_checkpoint_directory_gets_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        d = save_checkpoint(model(), TOK, tmp_path / "ck")
    finally:
        os.umask(old)
    assert (d.stat().st_mode & 0o777) == 0o755  # not mkdtemp's private 0700


def test_copy_checkpoint_never_follows_a_name_out_of_the_directory(tmp_path):
    """Before: a manifest listing '../victim.txt' made the training loop's copy link a file from outside the
    checkpoint into the new one (and a '../../x' name wrote outside the target)."""
    from orl.atomic_dir import copy_checkpoint

    (tmp_path / "victim.txt").write_text("secret")
    src = save_checkpoint(model(), TOK, tmp_path / "src")
    edit_json(src / "orl.json", lambda m: m["files"].__setitem__("../victim.txt", "sha256:00"))
    with pytest.raises(ValueError, match="'../victim.txt', which is not a plain file name"):
        copy_checkpoint(src, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def marked_copy(tmp_path, name: str, target: str = "ck", files: bool = True) -> Path:
    from orl.atomic_dir import MARK

    d = tmp_path / name
    if files:
        save_checkpoint(model(0), TOK, tmp_path / "src")
        os.rename(tmp_path / "src", d)
    else:
        d.mkdir()
    (d / MARK).write_text(json.dumps({"target": target}))
    return d


def test_a_kill_while_a_copy_is_deleted_leaves_it_orls_to_finish(tmp_path):
    """The manifest goes first and the mark last: a kill in between leaves a marked, incomplete copy, which the next
    write removes (before: rmtree's order could drop the mark first, and the unmarked rest blocked --out forever)."""
    half = marked_copy(tmp_path, ".ck.old-0123abcd")
    (half / "orl.json").unlink()  # what _remove_marked does first
    empty = tmp_path / ".ck.tmp-abcdefgh"  # a kill between mkdtemp and the mark
    empty.mkdir()
    save_checkpoint(model(1), TOK, tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_an_unmarked_complete_copy_is_reported_not_moved(tmp_path):
    """A copy an older orl left between its two renames looks like a user's backup: named, never moved or deleted."""
    save_checkpoint(model(0), TOK, tmp_path / "src")
    os.rename(tmp_path / "src", tmp_path / ".ck.old-0123abcd")
    done = recover(tmp_path / "ck")
    assert "not touched; rename the newest to ck" in done and ".ck.old-0123abcd" in done
    assert not (tmp_path / "ck").exists() and (tmp_path / ".ck.old-0123abcd" / "model.safetensors").exists()


def test_a_target_name_with_glob_characters_is_recovered(tmp_path):
    copy = marked_copy(tmp_path, ".run[v2].old-0123abcd", target="run[v2]")
    assert "recovered" in recover(tmp_path / "run[v2]") and not copy.exists()
    names = sorted(p.name for p in (tmp_path / "run[v2]").iterdir())
    assert names == sorted([*read_manifest(tmp_path / "run[v2]")["files"], "orl.json"])  # the mark is gone
    load_checkpoint(tmp_path / "run[v2]")
