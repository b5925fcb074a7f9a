"""dlmrt: low-latency block-diffusion decoding on static buffers."""
from orl.engine.config import DecodeConfig
from orl.engine.engine import Engine
from orl.engine.events import BlockEvent, DoneEvent, Event, StepEvent
from orl.engine.sequence import Generation

__all__ = ["BlockEvent", "DecodeConfig", "DoneEvent", "Engine", "Event", "Generation", "StepEvent"]
