"""ORL: on-policy residual learning for diffusion LMs, and dlmrt, its inference engine."""
from orl.model import ModelArgs, Transformer

__all__ = ["ModelArgs", "Transformer"]
__version__ = "0.1.0"
