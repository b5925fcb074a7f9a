// Live denoising view: POST /v1/dlm/stream, read its server-sent events from the fetch body (EventSource
// cannot POST), and draw every denoising step of the current block. Rendering pauses after each step
// (the "step delay") so a fast model can still be watched; later events wait in the stream meanwhile.
"use strict";

const $ = (id) => document.getElementById(id);
const SHOW = { " ": "␣", "\n": "↵", "\t": "⇥" };
const SPECIAL = /^<[^>]+>$/;

let controller = null;    // AbortController of the running request; aborting it cancels the generation
let valid = [];           // positions of the current block inside max_tokens (unresolved at its first step)
const counters = { steps: 0, masked: 0 };
// A server started with --api-key needs it on every /v1/ call: open the page as /#key=<key> (a URL
// fragment never leaves the browser, so the key is not sent in the page request or any Referer).
const API_KEY = new URLSearchParams(location.hash.slice(1)).get("key");
const AUTH = API_KEY ? { Authorization: `Bearer ${API_KEY}` } : {};

function shown(tok) {
  if (tok === "<eos>" || tok === "</s>" || tok === "<|endoftext|>") return "EOS";
  return SHOW[tok] ?? tok;
}

function cell(kind, text, title) {
  const el = document.createElement("span");
  el.className = `cell ${kind}`;
  if (SPECIAL.test(text) || text === "EOS") el.classList.add("special");
  el.textContent = text;
  if (title) el.title = title;
  return el;
}

// Cells of the block *after* this step: masked positions stay grey (with the model's current confidence
// as a bar), positions fixed by this step are highlighted, earlier ones are settled.
function stepCells(ev) {
  const cells = [];
  let masked = 0;
  ev.canvas.forEach((_, i) => {
    if (!valid[i]) return;
    const proposal = `proposal ${JSON.stringify(ev.tokens_text[i])}, p=${ev.confidence[i].toFixed(3)}`;
    if (ev.committed[i]) {
      cells.push(cell("new", shown(ev.tokens_text[i]), proposal));
    } else if (ev.unresolved[i]) {
      masked += 1;
      const c = cell("masked", "", proposal);
      const bar = document.createElement("i");
      bar.style.height = `${Math.round(100 * ev.confidence[i])}%`;
      c.appendChild(bar);
      cells.push(c);
    } else {
      cells.push(cell("settled", shown(ev.canvas_text[i])));
    }
  });
  return { cells, masked };
}

function setStats(ev) {
  $("stat-forwards").textContent = ev.forwards ?? ev.usage?.forwards ?? 0;
  $("stat-tpf").textContent = (ev.tpf ?? ev.usage?.tpf ?? 0).toFixed(2);
  $("stat-tps").textContent = (ev.tokens_per_s ?? 0).toFixed(1);
  $("stat-tokens").textContent = ev.generated ?? ev.usage?.completion_tokens ?? 0;
}

function traceBlock(block) {
  let sec = document.querySelector(`#trace [data-block="${block}"]`);
  if (!sec) {
    sec = document.createElement("details");
    sec.open = true;
    sec.dataset.block = block;
    sec.innerHTML = `<summary>block ${block}</summary>`;
    $("trace").appendChild(sec);
    document.querySelectorAll("#trace details").forEach((d) => { if (d !== sec) d.open = false; });
  }
  return sec;
}

function renderStep(ev) {
  if (ev.step === 0) valid = ev.unresolved.slice();
  const { cells, masked } = stepCells(ev);
  $("canvas").replaceChildren(...cells);
  counters.steps += 1;
  if (masked > 0) counters.masked += 1;
  $("canvas").dataset.steps = counters.steps;
  $("canvas").dataset.maskedSteps = counters.masked;
  $("stat-steps").textContent = counters.steps;
  $("stat-block").textContent = ev.block;
  setStats(ev);

  const row = document.createElement("div");
  row.className = "trace-row";
  const label = document.createElement("span");
  label.className = "step-label";
  label.textContent = `step ${ev.step}`;
  row.append(label, ...cells.map((c) => c.cloneNode(true)));
  const sec = traceBlock(ev.block);
  sec.appendChild(row);
  sec.querySelector("summary").textContent = `block ${ev.block} · ${ev.step + 1} step${ev.step ? "s" : ""}`;
}

function render(ev) {
  const out = $("final-text");
  if (ev.type === "start") {
    $("status").textContent = `running · prompt ${ev.prompt_tokens} tokens`;
  } else if (ev.type === "step") {
    renderStep(ev);
  } else if (ev.type === "block") {
    out.textContent = ev.text;
    setStats(ev);
  } else if (ev.type === "done") {
    out.textContent = ev.text;
    out.dataset.state = "done";
    setStats(ev);
    const blocks = ev.block_steps.length;
    $("status").textContent = `done · ${ev.finish_reason} · ${blocks} block${blocks > 1 ? "s" : ""} in ` +
      `${(1000 * ev.elapsed_s).toFixed(0)} ms`;
  } else if (ev.type === "error") {
    fail(ev.error.message);
  }
}

function fail(message) {
  $("error").textContent = message;
  $("error").hidden = false;
  $("final-text").dataset.state = "error";
  $("status").textContent = "error";
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const num0 = (v) => Math.max(0, Number(v) || 0);

async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const chunk = buf.slice(0, end);
      buf = buf.slice(end + 2);
      for (const line of chunk.split("\n")) {
        if (line.startsWith("data: ")) yield JSON.parse(line.slice(6));
      }
    }
  }
}

function request() {
  const num = (id) => Number($(id).value);
  return {
    prompt: $("prompt").value, threshold: num("threshold"), block_len: num("block-len"),
    max_tokens: num("max-tokens"), rule: $("rule").value, residual: $("residual").value,
  };
}

async function run(e) {
  e.preventDefault();
  for (const id of ["canvas", "trace"]) $(id).replaceChildren();
  Object.assign(counters, { steps: 0, masked: 0 });
  $("canvas").dataset.steps = $("canvas").dataset.maskedSteps = 0;
  $("final-text").textContent = "";
  $("final-text").dataset.state = "running";
  $("error").hidden = true;
  $("status").textContent = "waiting for the engine…";
  $("run").disabled = true;
  $("stop").disabled = false;
  controller = new AbortController();
  try {
    const resp = await fetch("/v1/dlm/stream", {
      method: "POST", headers: { "Content-Type": "application/json", ...AUTH },
      body: JSON.stringify(request()), signal: controller.signal,
    });
    if (!resp.ok) {
      const body = await resp.json().catch(() => ({ error: { message: resp.statusText } }));
      fail(`${resp.status}: ${body.error.message}`);
      return;
    }
    for await (const ev of sseEvents(resp.body)) {
      render(ev);
      if (ev.type === "step") await sleep(num0($("delay").value));
    }
  } catch (err) {
    if (err.name === "AbortError") {
      $("final-text").dataset.state = "stopped";
      $("status").textContent = "stopped";
    } else {
      fail(String(err));
    }
  } finally {
    $("run").disabled = false;
    $("stop").disabled = true;
    controller = null;
  }
}

async function init() {
  $("form").addEventListener("submit", run);
  $("stop").addEventListener("click", () => controller?.abort());
  const resp = await fetch("/v1/dlm/info", { headers: AUTH });
  if (resp.status === 401) {
    fail("this server needs an API key: open the page as /#key=<your key>");
    return;
  }
  const info = await resp.json();
  $("model").textContent = `${info.model} · context ${info.max_context}`;
  if (info.decoder !== "block_diffusion") {  // canvas and AR decoding stream no denoising steps
    $("run").disabled = true;
    fail(`this server's ${info.decoder} decoder has no denoising steps to show: use the API (/v1/completions)`);
    return;
  }
  const d = info.defaults;
  for (const [id, options, value] of [["rule", info.rules, d.rule], ["residual", info.residual_modes, d.residual]]) {
    $(id).replaceChildren(...options.map((o) => new Option(o, o, o === value, o === value)));
  }
  $("threshold").value = d.threshold;
  $("block-len").value = d.block_len;
  $("max-tokens").value = d.max_new_tokens;
}

init().catch((err) => fail(`cannot reach the server: ${err}`));
