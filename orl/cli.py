"""`orl` command line: parses arguments and calls into the library, nothing else."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from orl.errors import error_message


def cmd_info(args: argparse.Namespace) -> int:
    from orl.info import describe

    print(describe(args.dir))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    import dataclasses

    from orl.cli_tasks import load_task_flags, use_custom_tasks
    from orl.overrides import apply_overrides, describe_config
    from orl.presets import get_preset
    from orl.train.fsdp import refuse_recipe

    refuse_recipe(args.recipe, [item.partition("=")[0] for item in args.set or []])  # says why, not just "no field"
    custom = load_task_flags(args)  # registered before the config names them
    cfg = get_preset(args.recipe, args.preset)
    if args.base:
        if not hasattr(cfg, "base"):
            raise ValueError(f"--base: the {args.recipe} recipe starts from scratch and takes no base checkpoint")
        cfg = dataclasses.replace(cfg, base=args.base)
    cfg = apply_overrides(cfg, args.set or [], args.config)  # one pass: the file and --set checked together
    cfg = use_custom_tasks(cfg, get_preset(args.recipe, args.preset), custom)
    if args.show_config:
        print(f"# orl train --recipe {args.recipe} --preset {args.preset}: {type(cfg).__name__}")
        print(describe_config(cfg))
        return 0
    if not args.out:
        raise ValueError("--out is required (the run's checkpoint directory)")
    run = dict(resume=not args.fresh, allow_config_change=args.allow_config_change, device=args.device)
    if args.recipe == "pretrain":
        from orl.train.pretrain import pretrain

        pretrain(cfg, args.out, **run)
    elif args.recipe == "orl":
        from orl.train.orl import train_orl

        train_orl(cfg, args.out, **run)
    elif args.recipe == "convert":
        from orl.train.convert import convert

        convert(cfg, args.out, **run)
    elif args.recipe == "draft":
        from orl.train.draft import train_draft

        train_draft(cfg, args.out, **run)
    else:
        from orl.train.rcd import train_rcd

        train_rcd(cfg, args.out, **run)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from orl.cli_decode import ar_overrides
    from orl.engine.ar_step import ARConfig
    from orl.serve import ServerConfig, serve

    def names(text: str | None) -> tuple[str, ...]:
        return tuple(n.strip() for n in (text or "").split(",") if n.strip())

    config = ServerConfig.with_env_key(
        host=args.host, port=args.port, queue_size=args.queue_size, timeout_s=args.timeout,
        read_timeout_s=args.read_timeout, api_key=args.api_key, allowed_hosts=names(args.allowed_hosts),
        cors_origins=names(args.cors_origins), docs=args.docs)
    ar = ar_overrides(args)  # speculative decoding: the AR decoder serves (orl.serve.server.decoder_for)
    serve(args.model, config, device=args.device, dtype=args.dtype, ar=ARConfig(**ar) if ar else None,
          spec_verifier=args.spec_verifier, draft_vocab=args.draft_vocab)
    return 0


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated numbers, got {text!r}") from None


def cmd_eval(args: argparse.Namespace) -> int:
    from orl.cli_decode import ar_overrides, decode_overrides
    from orl.cli_tasks import load_task_flags
    from orl.eval.report import eval_summary
    from orl.eval.runner import EvalSpec, run_eval

    custom = load_task_flags(args)
    tasks = args.tasks.split(",") if args.tasks else custom or ["trained"]

    decode = decode_overrides(args)
    threshold = decode.pop("threshold", None)  # a point of the sweep, not a decode setting of the spec
    spec = EvalSpec(model=args.model, out=args.out, tasks=tasks, split=args.split, limit=args.limit,
                    thresholds=_floats(args.thresholds) if args.thresholds else
                    [threshold] if threshold is not None else None, decode=decode, ar=ar_overrides(args),
                    batch_size=args.batch_size, n_samples=args.n_samples, seed=args.seed, device=args.device,
                    prompt_style=args.prompt_style, progress=not args.no_progress, dtype=args.dtype,
                    spec_verifier=args.spec_verifier, draft_vocab=args.draft_vocab)
    print(eval_summary(run_eval(spec)))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from orl.eval.report import build_report

    print(build_report(args.records, args.out, args.train_logs or [], baseline=args.baseline,
                       threshold=args.headline_threshold, echo=print, split=args.split))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from orl.atomic_dir import check_apart
    from orl.checkpoint import load_checkpoint
    from orl.export import export_hf

    check_apart(Path(args.out), Path(args.model), "--model")  # (orl.atomic_dir) not over or inside its source
    model, tokenizer, manifest = load_checkpoint(args.model)
    out = export_hf(model, tokenizer, args.out, manifest, remote_code=False if args.plain else None)
    how = "trust_remote_code=True" if (out / "modeling_orl.py").exists() else "plain transformers"
    print(f"wrote {out} (AutoModelForCausalLM.from_pretrained, {how})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from orl.cli_bench import add_command as add_bench  # bench (speed and accuracy, one table)
    from orl.cli_demo import add_command as add_demo  # demo (base vs ORL on their own families)
    # the decode flags of generate, eval (and serve)
    from orl.cli_decode import AR_FLAGS, add_decode_flags, add_self_draft_flags
    from orl.cli_generate import add_command as add_generate  # generate (dLLMs, AR and canvas models)
    from orl.cli_tasks import add_task_flags  # --task-module / --tasks-file of train, eval (and demo, tasks)

    p = argparse.ArgumentParser(prog="orl", description="ORL post-training and the dlmrt inference engine")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks instead of one-line errors")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("info", help="print a checkpoint's manifest and parameter count")
    s.add_argument("dir", help="checkpoint directory")
    s.set_defaults(func=cmd_info)

    add_generate(sub)

    add_demo(sub)

    s = sub.add_parser("train", help="train with a recipe and preset (resumes from --out if it holds a run)",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _lazy_epilog(s, _presets_epilog)
    s.add_argument("--recipe", default="pretrain", choices=["pretrain", "orl", "rcd", "convert", "draft"],
                   help="pretrain: a base model from scratch; orl: ORL post-training; rcd: the off-policy baseline; "
                        "convert: an AR checkpoint (--base) -> block diffusion; draft: on-policy training of the "
                        "fused self-draft (a block-diffusion base that keeps its AR path)")
    s.add_argument("--base", help="base checkpoint (orl / rcd / draft: default the shipped tiny base; convert: the AR "
                                  "model)")
    s.add_argument("--preset", required=True, help="preset name (listed below)")
    s.add_argument("--out", help="checkpoint directory (written atomically, resumable)")
    s.add_argument("--config", metavar="FILE.toml", help="settings from a TOML file (applied before --set)")
    s.add_argument("--show-config", action="store_true", help="print every setting with its type and value, then exit")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field, nested with dots (model.dim=64, rollout.threshold=0.8, mix=1,2,3)")
    s.add_argument("--fresh", action="store_true", help="ignore an existing run in --out")
    s.add_argument("--allow-config-change", action="store_true",
                   help="resume a run in --out although its config differs (the change is logged)")
    s.add_argument("--device", default=None,
                   help="cpu | cuda | cuda:N for one process (default cpu); under torchrun each process uses the "
                        "GPU of its LOCAL_RANK when CUDA is available (--device cpu: gloo on the CPU)")
    add_task_flags(s)
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server + live denoising page (docs/SERVING.md)")
    s.add_argument("--model", required=True, help="checkpoint directory; its name is the served model id")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument("--queue-size", type=int, default=64, help="requests that may wait for the engine (default 64)")
    s.add_argument("--timeout", type=float, default=600.0, help="seconds per request, queue wait included (default 600)")
    s.add_argument("--read-timeout", type=float, default=10.0,
                   help="seconds to send a request's headers, and then its body (default 10)")
    s.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    s.add_argument("--dtype", help="cast the weights at load: float32 | bfloat16 | float16 (default: the file's); "
                                   "the model id becomes '<id>-<dtype>'")
    s.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1/ (or set ORL_API_KEY)")
    s.add_argument("--allowed-hosts", help="comma-separated Host names to serve under, besides IP addresses, "
                                           "localhost and --host ('.example.com': its subdomains too; '*': any)")
    s.add_argument("--cors-origins", help="comma-separated origins whose pages may call the API, e.g. "
                                          "https://app.example.com ('*': any); default none")
    s.add_argument("--docs", action="store_true", help="serve /docs and /openapi.json (off by default)")
    add_decode_flags(s, AR_FLAGS)  # the AR decoder's speculative settings: the server's, not a request's
    add_self_draft_flags(s)
    s.set_defaults(func=cmd_serve)
    s = sub.add_parser("eval", help="evaluate a checkpoint on tasks; one JSONL record per sample (resumable)")
    s.add_argument("--model", required=True, help="checkpoint directory")
    s.add_argument("--tasks", help="'trained' (the families the checkpoint records training on), 'all' (the v6 "
                                  "suite) or comma-separated names, e.g. long7xp,humaneval (default: the --task-module "
                                  "/ --tasks-file tasks, else trained; `orl tasks` lists them)")
    s.add_argument("--split", default="heldout", help="train | heldout | beyond (tasks v7: sizes past the training range)")
    s.add_argument("--limit", type=int, default=100, help="samples per task")
    add_decode_flags(s)  # --threshold: one point
    add_self_draft_flags(s)
    s.add_argument("--thresholds", help="comma-separated thresholds to sweep; overrides --threshold")
    s.add_argument("--dtype", help="cast the weights at load: float32 | bfloat16 | float16 (default: the file's)")
    s.add_argument("--batch-size", type=int, default=16, help="prompts per generate call; 1 for latency/tokens-per-s runs")
    s.add_argument("--n-samples", type=int, default=1, help="draws per prompt, for pass@k (use --temperature > 0)")
    s.add_argument("--seed", type=int, default=0, help="sample selection and decoding seed")
    s.add_argument("--device", default="cpu")
    s.add_argument("--prompt-style", default="auto", help="humaneval prompts: auto | base | chat")
    s.add_argument("--out", required=True, help="records JSONL (appended; finished samples are skipped)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_task_flags(s)
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("report", help="tables, plots and report.html from evaluation records")
    s.add_argument("records", nargs="+", help="records JSONL files")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--train-logs", nargs="+", metavar="LOG", help="post-training logs (*.log.jsonl): curves plot")
    s.add_argument("--baseline", metavar="MODEL", help="model name the headline compares the others with "
                                                       "(default: the first model of the first records file)")
    s.add_argument("--headline-threshold", type=float, default=0.9,
                   help="commit threshold of the headline comparison (nearest shared one if absent)")
    s.add_argument("--split", help="the records of one prompt split (e.g. heldout, beyond; 'all' pools them); "
                                   "needed when the records hold several")
    s.set_defaults(func=cmd_report)

    add_bench(sub)

    s = sub.add_parser("export", help="write a checkpoint as a Hugging Face repo transformers loads (equal logits)")
    s.add_argument("--model", required=True, help="checkpoint directory")
    s.add_argument("--out", required=True, help="output directory (refused if it holds files orl did not write)")
    s.add_argument("--plain", action="store_true",
                   help="only a plain Qwen3 directory (no modeling_orl.py); refused if the model needs orl's code")
    s.set_defaults(func=cmd_export)
    from orl.cli_models import add_commands  # import-gguf, fetch (real models)
    from orl.cli_tasks import add_commands as add_task_commands  # tasks (families, examples, what models know)
    from orl.cli_quant import add_commands as add_quant_commands  # quantize (int8 / fp8 / nvfp4)
    from orl.cli_average import add_commands as add_average_commands  # average (checkpoints of one model)
    from orl.cli_draft_vocab import add_commands as add_draft_vocab_commands  # draft-vocab (cheaper drafts)

    add_commands(sub)
    add_draft_vocab_commands(sub)
    add_quant_commands(sub)
    add_average_commands(sub)
    add_task_commands(sub)
    return p


def _presets_epilog() -> str:
    from orl.presets import PRESETS

    lines = ["presets (--recipe: --preset ...; `--show-config` prints one's settings):"]
    for recipe, presets in PRESETS.items():
        lines.append(f"  {recipe:<9} " + ", ".join(presets))
    return "\n".join(lines)


def _lazy_epilog(parser: argparse.ArgumentParser, make) -> None:
    """Build the epilog only when help is printed: listing presets imports the training code."""
    plain = parser.format_help

    def format_help() -> str:
        parser.epilog = make()
        return plain()

    parser.format_help = format_help


def _debug_flag_everywhere(p: argparse.ArgumentParser) -> None:
    """`orl CMD ... --debug` as well as `orl --debug CMD ...`."""
    for action in p._subparsers._group_actions:
        for sub in action.choices.values():
            sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    _debug_flag_everywhere(parser)
    args = parser.parse_args(argv)
    if args.debug:
        return args.func(args)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"orl {args.cmd}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `orl tasks | head`: the reader left; nothing to report (Python's documented recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not raise again
        return 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader closed the pipe
    except Exception as e:  # one line naming the problem; --debug shows the traceback
        print(f"orl {args.cmd}: error: {error_message(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
