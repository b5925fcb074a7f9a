"""`orl serve --dtype` (issue 18): the weights are cast at load through load_checkpoint's dtype (the path
`orl generate` / `orl eval --dtype` take), the served model id becomes '<id>-<dtype>' as eval records
name a cast model, and an unknown name exits 2 naming it before anything is loaded."""
from __future__ import annotations

import pytest
import torch

import orl.serve.server as server
from orl.cli import main
from test_serve import tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("serve_dtype"))


@pytest.fixture
def served(monkeypatch):
    """Runs `orl serve` up to the HTTP server: records the app's engine dtype and model id instead."""
    seen = {}

    def app(engine, name, **kw):
        seen.update(dtype=next(engine.model.parameters()).dtype, name=name)
        return "app"

    class NoServer:
        def run(self, sockets):
            seen["ran"] = True

    monkeypatch.setattr(server, "create_app", app)
    monkeypatch.setattr(server, "uvicorn_server", lambda app, config: NoServer())
    return seen


def test_serve_casts_at_load_and_names_the_cast_model(ckpt, served):
    assert main(["serve", "--model", str(ckpt), "--port", "0", "--device", "cpu", "--dtype", "bfloat16"]) == 0
    assert served == {"dtype": torch.bfloat16, "name": "tiny-bfloat16", "ran": True}
    assert main(["serve", "--model", str(ckpt), "--port", "0", "--device", "cpu"]) == 0
    assert served["dtype"] == torch.float32 and served["name"] == "tiny"


def test_serve_bad_dtype_exits_2_before_loading(ckpt, served, capsys, monkeypatch):
    monkeypatch.setattr("orl.checkpoint.load_checkpoint", lambda *a, **k: pytest.fail("loaded"))
    assert main(["serve", "--model", str(ckpt), "--port", "0", "--device", "cpu", "--dtype", "float8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("orl serve: error:") and "float8" in err and "bfloat16" in err
    assert served == {}
