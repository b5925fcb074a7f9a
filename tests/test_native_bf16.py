"""orl.device.native_bf16: bf16 autocast only where bf16 matmuls are native (the gemma presets' choice)."""
from dataclasses import replace

import torch
from test_convert import base, cv, smoke_cfg  # noqa: F401  (base: the tiny AR checkpoint fixture)

from orl.device import native_bf16


def test_the_cpu_answer_follows_its_bf16_instructions(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert native_bf16("cpu") is False                       # an AVX2 machine: bf16 would be emulated
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert native_bf16("cpu") is True
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert native_bf16(torch.device("cpu")) is True
    assert native_bf16("mps") is False


def test_a_cpu_run_in_fp32_on_a_native_bf16_cpu_says_so(base, tmp_path, monkeypatch):
    """The presets stay fixed (a preset names one config, and a run resumes in the precision it began with);
    the run tells the user when --set bf16=true would be faster, and only then."""
    for native, bf16, said in ((True, False, True), (False, False, False), (True, True, False)):
        monkeypatch.setattr(cv, "native_bf16", lambda device, n=native: n)
        lines = []
        cv.convert(replace(smoke_cfg(base), steps=1, bf16=bf16), tmp_path / f"{native}-{bf16}", log=lines.append)
        assert any("--set bf16=true" in str(x) for x in lines) is said
