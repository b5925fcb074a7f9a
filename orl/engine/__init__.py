"""dlmrt: low-latency block-diffusion decoding on static buffers."""
from orl.engine.config import DecodeConfig
from orl.engine.engine import Engine, Generation

__all__ = ["DecodeConfig", "Engine", "Generation"]
