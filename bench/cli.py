"""`roost bench ...`: one command per benchmark, each printing JSON (docs/benchmarks.md)."""

from __future__ import annotations

import json
import os

import typer


def bench_env(
    env: str = typer.Argument("alfworld", help="Env name or entry point."),
    concurrency: list[int] = typer.Option(
        [], "--concurrency", help="Concurrent episodes (repeatable; default 1, 8, 32; osworld: 1, 4)."
    ),
    seconds: float = typer.Option(5.0, help="Measuring time per quantity and level."),
    workers: int = typer.Option(os.cpu_count() or 1, help="Server worker processes."),
    env_arg: list[str] = typer.Option([], "--env-arg", help="KEY=VALUE passed to the env (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Env server throughput: resets/s and steps/s per concurrency, and RSS per live episode
    (osworld: desktops at once, median reset and step ms, RSS per desktop)."""
    import asyncio

    from roost.bench import env as env_bench
    from roost.bench import osworld as osworld_bench

    if env == "osworld":
        config = env_bench.BenchConfig(env, tuple(env_arg), tuple(concurrency or (1, 4)), seconds, workers)
        results = osworld_bench.as_json(asyncio.run(osworld_bench.run_osworld_bench(config)))
        line = (
            "osworld desktops={desktops:>2}: reset {reset_ms_median:8.1f} ms  step {step_ms_median:7.1f} ms  "
            "{rss_mb_per_desktop:7.1f} MB/desktop"
        )
    else:
        config = env_bench.BenchConfig(env, tuple(env_arg), tuple(concurrency or (1, 8, 32)), seconds, workers)
        results = env_bench.as_json(asyncio.run(env_bench.run_bench(config)))
        line = (
            "{env} c={concurrency:>3}: {resets_per_s:8.2f} resets/s {steps_per_s:8.2f} steps/s "
            "{rss_mb_per_episode:7.2f} MB/episode"
        )
    typer.echo(json.dumps(results, indent=1) if as_json else "\n".join(line.format(**r) for r in results))


def bench_engine(
    model: str = typer.Option(None, help="Model to benchmark (default: tiny; tiny-vllm when vllm is compared)."),
    backend: list[str] = typer.Option(
        ["embedded"], "--backend", help="Engine to measure: embedded or vllm (repeatable; rows side by side)."
    ),
    concurrency: str = typer.Option("1,8,32", help="Comma-separated concurrency levels."),
    new_tokens: int = typer.Option(64, help="Tokens generated per request."),
    prompt_tokens: int = typer.Option(32, help="Prompt length per request."),
    temperatures: str = typer.Option("0,1", help="Comma-separated temperatures (0: greedy; RL samples at 1)."),
    hf: bool = typer.Option(True, "--hf/--no-hf", help="Also measure Hugging Face generate on each batch."),
    constraint: str = typer.Option(
        None,
        help="Also measure each level of the embedded engine with every request "
        "held to a grammar: json (a JSON schema).",
    ),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print one JSON object per level."),
) -> None:
    """Decode tokens/s and time to first token of each engine (vs Hugging Face `generate`) on
    the same model and batch, greedy and at temperature 1; with --constraint, constrained vs
    unconstrained too."""
    from roost.bench.engine import CONSTRAINTS, run_bench

    unknown = sorted(set(backend) - {"embedded", "vllm"})
    if unknown:
        raise typer.BadParameter(f"unknown backend {unknown}; expected embedded or vllm", param_hint="--backend")
    if constraint is not None and constraint not in CONSTRAINTS:
        raise typer.BadParameter(
            f"unknown constraint {constraint!r}; choose one of {', '.join(CONSTRAINTS)}", param_hint="--constraint"
        )
    levels = [int(c) for c in concurrency.split(",")]
    temps = tuple(float(t) for t in temperatures.split(","))
    for row in run_bench(model, levels, new_tokens, prompt_tokens, temps, tuple(backend), hf, constraint):
        typer.echo(json.dumps(row) if as_json else "  ".join(f"{k}={v}" for k, v in row.items()))


def bench_gateway(
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print one JSON object per concurrency."),
    concurrency: str = typer.Option("1,16,256", help="Comma-separated concurrency levels."),
    seconds: float = typer.Option(4.0, help="Measuring time per level and path."),
    engine_url: str = typer.Option(None, help="Use this running scripted engine instead of starting one."),
    wire: str = typer.Option("chat", help="The gateway wire the load goes through: chat, messages or responses."),
    workers: str = typer.Option(
        None,
        help="Comma-separated gateway process counts (e.g. 1,2): a `roost gateway --workers N` for each in "
        "turn, the load spread over --sessions sessions (default: one process, calls on plain /v1).",
    ),
    sessions: int = typer.Option(64, min=1, help="With --workers: how many sessions the load is spread over."),
) -> None:
    """Same chat load straight to the engine's scripted sampler and through the gateway."""
    from roost.bench.gateway import run_bench

    counts = [int(w) for w in workers.split(",")] if workers else None
    levels = [int(c) for c in concurrency.split(",")]
    for row in run_bench(levels, seconds=seconds, engine_url=engine_url, wire=wire, workers=counts, sessions=sessions):
        typer.echo(json.dumps(row) if as_json else "  ".join(f"{k}={v}" for k, v in row.items()))


def bench_sandbox(
    backends: str = typer.Option("docker,bubblewrap,local", help="Comma-separated backends to measure."),
    reps: int = typer.Option(5, help="Sandbox starts per measurement (median reported)."),
    execs: int = typer.Option(20, help="Exec round trips (median reported)."),
    repo_files: int = typer.Option(500, help="Files in the generated repository for fresh_repo_ms."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print one JSON object per backend."),
) -> None:
    """Median sandbox start, exec round trip and fresh-repository times, per backend.

    A backend that cannot run here is reported with available=false and the reason.
    """
    from roost.bench.sandbox import run_bench

    for row in run_bench(
        [b.strip() for b in backends.split(",") if b.strip()], reps=reps, execs=execs, repo_files=repo_files
    ):
        typer.echo(json.dumps(row) if as_json else "  ".join(f"{k}={v}" for k, v in row.items()))


def bench_prefix_tree(
    case: list[str] = typer.Option(
        [], help="Cases to run: grpo, agentic, vision (repeat the option; default grpo and agentic)."
    ),
    vision: bool = typer.Option(
        False, "--vision", help="The vision case: a GRPO group sharing a screenshot prompt on a Qwen3-VL model."
    ),
    vocab_size: int = typer.Option(4096, help="Vocabulary of the benchmark model (151936 = Qwen3's)."),
    repeats: int = typer.Option(2, help="Timed steps per layout (alternating); the fastest is reported."),
    threads: int = typer.Option(2, help="torch threads per layout run."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print one JSON object per case."),
) -> None:
    """A training step on flat vs prefix-tree packed batches: time, peak memory, logprob equality."""
    from roost.bench.prefix_tree import CASES, run_bench

    cases = list(case) or ([] if vision else ["grpo", "agentic"])
    if vision and "vision" not in cases:
        cases.append("vision")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise typer.BadParameter(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES)}", param_hint="--case")
    for row in run_bench(cases, vocab=vocab_size, repeats=repeats, threads=threads):
        typer.echo(json.dumps(row) if as_json else "  ".join(f"{k}={v}" for k, v in row.items()))


def bench_viewer(
    calls: int = typer.Option(100_000, help="Calls in the generated store."),
    calls_per_session: int = typer.Option(10, help="Calls per session."),
    group_size: int = typer.Option(8, help="Sessions per group."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Build a store of CALLS calls, then time the viewer's pages on it (open, groups, group, session, call)."""
    from roost.bench.viewer import run_bench

    result = run_bench(calls, calls_per_session, group_size)
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        return
    for page, ms in result["pages_ms"].items():
        typer.echo(f"{page:<24} {ms:8.1f} ms")


def bench_tinker(
    base_model: str = typer.Option("tiny", help="The base model the server trains: 'tiny' or a Hugging Face folder."),
    concurrency: str = typer.Option("1,4", help="Comma-separated numbers of concurrent SDK clients."),
    steps: int = typer.Option(3, help="forward_backward + optim_step steps per client and level."),
    batch: int = typer.Option(4, help="Sequences per forward_backward."),
    seq_len: int = typer.Option(128, help="Tokens per sequence."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The Tinker SDK against `roost tinker serve`: fwd_bwd tokens/s, optim_step s, sampler save s and bytes."""
    from roost.bench.tinker import TinkerBenchConfig, run_bench

    levels = tuple(int(c) for c in concurrency.split(","))
    result = run_bench(TinkerBenchConfig(base_model, levels, steps, batch, seq_len))
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        return
    for mode in ("full_weight", "lora"):
        if isinstance(result[mode], str):
            typer.echo(f"{mode}: {result[mode]}")
            continue
        for row in result[mode]:
            typer.echo(
                f"{mode} clients={row['clients']}: {row['forward_backward_tokens_per_s']:10.1f} fwd_bwd tokens/s  "
                f"optim_step {row['optim_step_s_median']:.3f} s"
            )
    typer.echo("sampler save: {seconds:.3f} s, {bytes} bytes".format(**result["sampler_save"]))


def bench_weight_sync(
    model: str = typer.Option("tiny", help="The model the engine serves: 'tiny' or a Hugging Face folder."),
    repeats: int = typer.Option(3, help="Updates per transport (alternated; medians reported)."),
    chunk_mb: int = typer.Option(64, help="The http transport's chunk budget, in MiB."),
) -> None:
    """One weight update into the embedded engine by disk (write the folder, load it) and by http
    (send the state dict in chunks, commit): seconds and the pause a gateway would see, as JSON."""
    from roost.bench.weight_sync import WeightSyncBenchConfig, run_bench

    typer.echo(json.dumps(run_bench(WeightSyncBenchConfig(model, repeats, chunk_mb)), indent=1))


def bench_cluster(
    model: str = typer.Option("tiny", help="The model every engine serves: 'tiny' or a Hugging Face folder."),
    engines: str = typer.Option("1,2,4", help="Comma-separated engine counts, each behind a gateway of its own."),
    repeats: int = typer.Option(3, help="Updates per transport and engine count (alternated; medians reported)."),
    chunk_mb: int = typer.Option(64, help="The http transport's chunk budget, in MiB."),
    as_json: bool = typer.Option(
        True, "--json/--no-json", help="Print one JSON object (else a line per row); progress goes to stderr."
    ),
) -> None:
    """A weight update into every engine behind one gateway, by disk (one folder written, every
    engine loads it) and by http (the state dict sent to each engine): seconds, the gateway's
    pause and bytes moved per engine count, as JSON; all on this machine, over loopback."""
    from roost.bench.cluster import ClusterBenchConfig, run_bench

    try:
        config = ClusterBenchConfig(model, tuple(int(n) for n in engines.split(",")), repeats, chunk_mb)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc} (--engines {engines!r}, --repeats {repeats})") from exc
    result = run_bench(config, progress=lambda line: typer.echo(line, err=True))
    if as_json:
        typer.echo(json.dumps(result, indent=1))
        return
    for row in result["rows"]:
        typer.echo("  ".join(f"{k}={v}" for k, v in row.items()))


def bench_rollout(
    concurrency: str = typer.Option("2,4,8", help="Comma-separated numbers of programs run at once."),
    programs: int = typer.Option(16, min=1, help="Programs (sessions) per level."),
    turns: int = typer.Option(6, min=1, help="Calls per program."),
    words: int = typer.Option(120, min=1, help="Words each turn adds to the prompt."),
    tool_s: float = typer.Option(0.3, min=0, help="Mean tool wait between calls, in seconds."),
    slots: int = typer.Option(4, min=1, help="The engine's slots (--max-running)."),
    modes: str = typer.Option("off,on", help="Comma-separated: off (recency), on (sessions kept and admitted)."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print one JSON object per row."),
) -> None:
    """A multi-turn agent workload with program-awareness off and on: episodes/min, hit rate."""
    from roost.bench.rollout import RolloutBenchConfig, run_bench

    config = RolloutBenchConfig(
        levels=tuple(int(c) for c in concurrency.split(",")),
        programs=programs,
        turns=turns,
        words_per_turn=words,
        tool_s=tool_s,
        slots=slots,
        modes=tuple(m.strip() for m in modes.split(",")),
    )
    for row in run_bench(config, progress=lambda line: typer.echo(line, err=True))["rows"]:
        typer.echo(json.dumps(row) if as_json else "  ".join(f"{k}={v}" for k, v in row.items()))


def bench_arms(
    minutes: float = typer.Option(6.0, min=0.01, help="RL wall time per arm, in minutes."),
    out: str = typer.Option("runs/arms", help="Folder of the three runs (each replaced)."),
    quick: bool = typer.Option(
        False, "--quick", help="The demo's cut-down sizes: checks the pipeline, measures nothing."
    ),
) -> None:
    """GiGPO, PPO with a trained critic and on-policy distillation from GiGPO's checkpoint, each
    given the same RL wall time from one SFT checkpoint on the demo's ALFWorld setting: held-out
    success paired game by game, as JSON (progress goes to stderr)."""
    from pathlib import Path

    from rich.console import Console

    from roost.bench.arms import ArmsConfig, run_bench

    result = run_bench(ArmsConfig(minutes, Path(out).resolve(), quick), Console(stderr=True))
    typer.echo(json.dumps(result, indent=1))


def bench_staleness(
    from_run: str = typer.Option(..., help="A `roost bench arms` run's gigpo folder: its SFT checkpoint and eval."),
    staleness: str = typer.Option("0,1,3,6", help="Comma-separated algorithm.max_staleness bounds."),
    corrections: str = typer.Option(
        "none,tis", help="Comma-separated: none, tis, seq_tis, mis, geo_mask, icepop, outlier_mask, cispo."
    ),
    minutes: float = typer.Option(4.0, min=0.01, help="RL wall time per run, in minutes."),
    out: str = typer.Option("runs/staleness", help="Folder of the runs (each replaced)."),
    old_logprobs: str = typer.Option(
        "recompute",
        help="recompute: the trainer's old logprobs before one update a step (the corrections see the "
        "staleness); rollout: the demo's two PPO epochs against the rollout policy (every correction a no-op).",
    ),
) -> None:
    """Async RL from one SFT checkpoint at each staleness bound with each off-policy correction,
    the same minutes each: held-out success paired with the checkpoint's, and whether training
    collapsed, as JSON (progress goes to stderr)."""
    from pathlib import Path

    from rich.console import Console

    from roost.bench.staleness import StalenessConfig, run_bench

    try:
        config = StalenessConfig(
            Path(from_run).resolve(),
            tuple(int(k) for k in staleness.split(",")),
            tuple(c.strip() for c in corrections.split(",")),
            minutes,
            Path(out).resolve(),
            old_logprobs,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(json.dumps(run_bench(config, Console(stderr=True)), indent=1))


def register(app: typer.Typer, bench: typer.Typer) -> None:
    bench.command("arms")(bench_arms)
    bench.command("staleness")(bench_staleness)
    bench.command("engine")(bench_engine)
    bench.command("gateway")(bench_gateway)
    bench.command("env")(bench_env)
    bench.command("sandbox")(bench_sandbox)
    bench.command("prefix-tree")(bench_prefix_tree)
    bench.command("viewer")(bench_viewer)
    bench.command("tinker")(bench_tinker)
    bench.command("weight-sync")(bench_weight_sync)
    bench.command("cluster")(bench_cluster)
    bench.command("rollout")(bench_rollout)
