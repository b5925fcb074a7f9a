from orl.model.args import ModelArgs
from orl.model.kv_cache import KVCache
from orl.model.model import Transformer

__all__ = ["ModelArgs", "KVCache", "Transformer"]
