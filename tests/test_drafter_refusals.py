"""A draft-only checkpoint is only ever a drafter: places that would take it as something else refuse it by name
(found by a hostile new-user review, session 48: a drafter verified other drafts without a word, and `orl quantize`
wrote a drafter that no command could decode)."""
from __future__ import annotations

from pathlib import Path

import pytest

from orl.checkpoint import CheckpointError, load_checkpoint
from orl.cli_quant import quantize_checkpoint
from orl.quant import QuantizationError
from orl.verifier import attach_verifier

CK = Path(__file__).resolve().parents[1] / "checkpoints"


def test_a_drafter_is_refused_as_a_verifier():
    model, _, manifest = load_checkpoint(CK / "orl-tiny7-base")
    with pytest.raises(CheckpointError, match="orl-tiny7-draft is a draft-only checkpoint .*cannot verify"):
        attach_verifier(model, manifest, "checkpoints/orl-tiny7-base", str(CK / "orl-tiny7-draft"), "fused")
    # the base itself still verifies the base (the same call, a checkpoint that drafts for nobody)
    assert attach_verifier(model, manifest, "checkpoints/orl-tiny7-base", str(CK / "orl-tiny7-base"), "fused")


def test_quantize_refuses_a_drafter_and_writes_nothing(tmp_path):
    out = tmp_path / "q8"
    with pytest.raises(QuantizationError, match="draft-only checkpoint .*not quantized alone"):
        quantize_checkpoint(str(CK / "orl-tiny7-ardraft"), "int8", str(out))
    assert not out.exists()
    path, before, after = quantize_checkpoint(str(CK / "orl-tiny7-ar"), "int8", str(out))  # its verifier quantizes
    assert Path(path).is_dir() and after["total"] < before["total"]


def test_a_closed_pipe_is_not_reported_as_an_error():
    """`orl tasks | head -1` printed `orl tasks: error: Broken pipe` (review, session 48): the reader leaving is
    not the command's failure; it ends silently with 141 (128 + SIGPIPE), as a shell's writer would."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader has left before the first line, so every write meets a closed pipe
    try:
        proc = subprocess.run([sys.executable, "-m", "orl", "tasks"], stdout=write, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write)
    err = proc.stderr.decode()
    assert proc.returncode == 141 and "error" not in err, (proc.returncode, err)
