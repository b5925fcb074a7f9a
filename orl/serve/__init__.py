"""OpenAI-compatible HTTP server over the dlmrt engine, and a web page that shows the denoising live."""
from orl.serve.app import create_app
from orl.serve.config import ServerConfig
from orl.serve.server import serve

__all__ = ["ServerConfig", "create_app", "serve"]
