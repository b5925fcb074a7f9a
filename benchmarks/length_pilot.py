"""Pilot (session 11): does anything about positions let the AR stage extrapolate past its training sizes?
One family, AR stage only, greedy AR decoding with contiguous positions; in range vs beyond, by size.
variants: rope (baseline), rstride (training positions = cumsum of strides drawn from 1..3 per token,
so the relative distances beyond-range prompts need at test were seen in training), half (rotary on half
of each head, the other half position-free), min (rotary on one pair of each head's 32 dims, the fastest
frequency only: close to NoPE, which Kazemnejad et al. 2023 found to extrapolate best on small algorithmic
tasks, while a block's masks still get a position signal), assoc (session 16: RoPE, half of each batch an
auxiliary task trained at longer sizes than the family's range - "extrapolation by association": the family
is only ever trained in its range, the auxiliary shares its alignment of output element k to input item k).
Helpers: orl/eval/tasks/helpers.py (long7 -> long7h: each digit doubled, comma-separated, 4-32 digits; the
session-16 run below used it under its first name, `double`, so its draws differ from a rerun's).
hintsp / hintsph also take split7 (-> split7xp) and constr7 (-> constr7xp), or a hinted family by its name (constr7xq), and every hinted variant keysort7 (-> keysort7x), the
session-43 hinted multi-answer families (orl/eval/tasks/hinted_choice.py); for them the pilot prints how many answers
have the markers right (`markers_right`: alignment and length, whatever the free choices) and three failures;
`hintsph` trains them beside their length helpers (orl/eval/tasks/hint_choice_helpers.py).
hints (session 19): index hints (Zhou et al. 2023, "What algorithms can transformers learn?"): the family's
items carry unique markers in prompt and answer, so output element k finds input item k by content, and the
answer ends where the prompt's markers end. long7 -> "cumsum:a3b1c4=" -> "a3b4c8", the markers a contiguous
window of a-zA-Z at a random start (every marker and successor pair is trained); prog7 -> fresh variables,
each statement assigns the next letter of a random window of a-z ("echo d=3;e=d+4;f=e-2:" -> "d=3,e=7,f=5",
SSA form): the tasks long7x and prog7x. hintsp: the same with the answer's first marker as the prompt's last
character (long7xp, prog7xp). hintsph: the xp family next to its helper (prog7xph, long7xph in
orl/eval/tasks/hint_helpers.py), as in assoc.
For long and prog families the pilot also prints the shape: answers whose skeleton (numbers replaced by '#') is
the reference's, i.e. keys, separators and length right whatever the values, and the values right in those.
Modifiers (session 26) combine with any variant after a '+': `+logn` (scalable softmax, ModelArgs.attn_logn: each
head's logits times a learned s_h * ln(number of keys seen)), `+rstride`, `+half`, `+min` (as above), e.g.
`hintsp+logn long7 1500`. For the hinted long and prog families the pilot also prints each split's running steps
(judged against the model's own previous value, benchmarks/length_table.py --steps) by element index, cut at the first index past the family's range (long 21, prog 8)."""
import sys, time
from pathlib import Path
from dataclasses import replace
import torch
import orl.train.pretrain as P
from orl.train.pretrain import PretrainConfig, pretrain
from orl.presets.pretrain import tiny_model7
from orl.eval.shape import has_shape, shape_counts
from orl.eval.tasks import CHOICE_HELPERS, HELPERS, HINT_HELPERS, get_task
from orl.engine.ar import ARConfig, ARDecoder
from orl.tokenizer import CharTokenizer
sys.path.insert(0, __import__("os").path.dirname(__file__))
from length_table import STEPPERS  # noqa: E402

variant, family, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
# session 44: `init=RUN` starts from a trained checkpoint (PretrainConfig.init: its weights, a fresh schedule), the
# pilot of a curriculum stage that adds a family to a trained base; `aux=HELPER` picks the helper of a hinted family
opts = dict(a.split("=", 1) if "=" in a else (a, "") for a in sys.argv[4:])
if set(opts) - {"init", "aux"} or not all(opts.values()):
    sys.exit(f"options are init=CHECKPOINT_DIR and aux=HELPER[+HELPER], got {sys.argv[4:]}")
kind, *mods = variant.split("+")
MODIFIERS = {"logn", "rstride", "half", "min"}
if kind not in {"rope", "assoc", "hints", "hintsp", "hintsph"} | MODIFIERS or set(mods) - MODIFIERS:
    sys.exit(f"unknown variant {variant!r}: rope|assoc|hints|hintsp|hintsph|logn|rstride|half|min, then +modifiers")
mods = [kind, *mods]  # a modifier alone is a variant too (`logn long7 1500`)
if "half" in mods and "min" in mods:
    sys.exit("half and min are two rotary fractions: take one")
BY_NAME = ("constr7xq",)  # prefilled hinted families a pilot names itself (no v7 name maps to them)
if kind in ("hints", "hintsp", "hintsph") and family in BY_NAME:
    if kind == "hints":
        sys.exit(f"{family} is a prefilled format: pilot it with hintsp or hintsph")
elif kind in ("hints", "hintsp", "hintsph"):  # the library's hinted families (orl/eval/tasks/hinted*.py)
    if family not in ("long7", "prog7", "split7", "constr7", "keysort7"):
        sys.exit(f"{variant} takes a v7 family (long7, prog7, split7, constr7, keysort7) or one of {', '.join(BY_NAME)}")
    family += "x" if kind == "hints" or family == "keysort7" else "xp"  # keysort7x has no prefilled form
    if family in ("split7x", "constr7x"):
        sys.exit(f"{family} does not exist: split7 and constr7 have only the prefilled hinted form (hintsp, hintsph)")
# the helper the assoc variants train beside each family; named for the hinted ones, since long7xp has two
AUX = {"prog7xp": "prog7xph", "long7xp": "long7xph"}
for h in HELPERS + CHOICE_HELPERS:  # a family's first helper is its default (later ones are picked with aux=)
    AUX.setdefault(h.family, h.name)
AUX.update({family: opts["aux"]} if "aux" in opts else {})
aux = AUX.get(family, "").split("+")  # aux=A+B: two helpers, sharing the helper half of each batch
assoc = kind in ("assoc", "hintsph")
if "aux" in opts and not assoc:
    sys.exit(f"aux= needs a variant that trains helpers (assoc, hintsph), not {variant!r}")
if assoc and not set(aux) <= {h.name for h in HELPERS + HINT_HELPERS + CHOICE_HELPERS}:
    sys.exit(f"aux={'+'.join(aux)}: not helpers (orl/eval/tasks/helpers.py, hint_helpers.py, hint_choice_helpers.py)")
rotary = [m for m in mods if m in ("half", "min")]
torch.set_num_threads(1)
model = replace(tiny_model7(), learned_pos=False, rotary_fraction={"half": 0.5, "min": 2 / 32}.get(rotary[0] if rotary else "", 1.0),
              attn_logn="logn" in mods)
if "rstride" in mods:
    def strided(b, max_len, frac, gen):
        B, T = b.pos.shape
        steps_ = torch.randint(1, 4, (B, T), generator=gen)
        steps_[:, 0] = 0
        b.pos = torch.cumsum(steps_, dim=1)  # rows start at 0; pads get positions too (masked anyway)
    P.shift_positions = strided
tasks, mix = ((family, *aux), (16, *[16 // len(aux)] * len(aux))) if assoc else ((family,), ())
cfg = PretrainConfig(model=model, tasks=tasks, mix=mix, batch_size=32, ar_steps=steps, diffusion_steps=0, lr=3e-3,
                     warmup=50, eval_every=10**6, eval_samples=5, save_every=10**6, bf16=False, threads=1,
                     pos_offset=1.0 if "rstride" in mods else 0.0, init=opts.get("init", ""))
out = (f"runs/pilot2/{family}-{variant}" + (f"-{steps}" if steps != 1500 else "")
       + (f"-{opts['aux'].replace('+', '-')}" if "aux" in opts else "") + (f"-from-{Path(opts['init']).name}" if "init" in opts else ""))
t0 = time.time()
m = pretrain(cfg, out, log=lambda *a: None)  # a finished run in `out` is loaded, not retrained
print("train s", round(time.time() - t0), flush=True)
tok = CharTokenizer(); dec = ARDecoder(m, tok)
for name, split in [(family, "heldout"), (family, "beyond")] + ([(a, "heldout") for a in aux] if assoc else []):
    task = get_task(name)
    ss = [task.sample(split, i) for i in range(80 if name == family else 160)]
    budget = min(112, m.args.max_seq_len - max(len(tok.encode(s.prompt)) for s in ss))  # helpers' prompts are longer
    gens = dec.generate([s.prompt for s in ss], ARConfig(max_new_tokens=budget))
    ok = [task.verify(s.prompt, g.text) for s, g in zip(ss, gens)]
    by = {}
    for s, o in zip(ss, ok):
        by.setdefault(task.size(s.prompt), []).append(o)
    print(variant, name, split, "acc", round(sum(ok) / len(ok), 3), {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by.items())}, flush=True)
    if has_shape(name):  # answers with the reference's skeleton, and the right values in those (orl/eval/shape.py)
        shaped, right, total = shape_counts([(s.answer, g.text) for s, g in zip(ss, gens)])
        print(variant, name, split, "shape", f"{shaped}/{len(ss)}", "values right in those", f"{right}/{total}", flush=True)
    if hasattr(getattr(task, "inner", None), "markers_right"):  # hinted multi-answer families: alignment and length
        print(variant, name, split, "markers right", f"{sum(task.inner.markers_right(s.prompt, g.text) for s, g in zip(ss, gens))}/{len(ss)}",
              "examples", [(s.prompt, g.text) for s, g, o in zip(ss, gens, ok) if not o][:3], flush=True)
    if name == "split7xp":  # the free choice kept? a copy of N (x = N, y = 0) is valid and would need no split
        parts = [task.inner.addends(task.inner.parse(s.prompt)[0], g.text) for s, g in zip(ss, gens)]
        print(variant, name, split, "x = N (copies)", f"{sum(p is not None and set(p[1]) == {'0'} for p in parts)}/{len(ss)}",
              "answers", [g.text for g in gens[:4]], flush=True)
    if name in STEPPERS:  # running steps by element index, cut at the first index past the training range
        cut, cells = task.sizes[1] + 1, {}
        for s, g in zip(ss, gens):
            for k, _, right in STEPPERS[name](s.prompt, g.text):
                cell = cells.setdefault(k >= cut, [0, 0])
                cell[0] += right
                cell[1] += 1
        print(variant, name, split, f"steps k<{cut}", "/".join(map(str, cells.get(False, [0, 0]))),
              f"k>={cut}", "/".join(map(str, cells.get(True, [0, 0]))), flush=True)
