"""orl.device.native_bf16: bf16 autocast only where bf16 matmuls are native (the gemma presets' choice)."""
import torch

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


def test_the_gemma_presets_follow_the_cpu(monkeypatch):
    from orl.presets import get_preset

    for native in (False, True):
        monkeypatch.setattr("orl.presets.convert.native_bf16", lambda device, n=native: n)
        assert get_preset("convert", "gemma_convert").bf16 is native
        assert get_preset("convert", "gemma_convert_short").bf16 is native
    assert get_preset("convert", "gemma_convert_gpu").bf16 is True  # a GPU preset: always
