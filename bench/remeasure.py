"""The held-out re-measurement of an aggregate (distrai/protocol/remeasure.py): what it costs a follower per
window, how far an honest and a poisoned aggregate land from the tolerance, and how far apart the
losses that two nodes compare can be when their numerics differ. Writes docs/remeasure.md, one
section per device it ran on (a run rewrites its own section and keeps the others).

1. The shipped CPU run (distrai/configs/cpu-localnet.toml): three miners train H steps from the
   initial model, the run's codec encodes their updates and the outer step aggregates them (an
   honest aggregate); the `poison` adversary's update alone makes the colluding leader's aggregate.
   For many windows' samples (`follow.heldout_sequences` sequences drawn from a block hash each, as
   followers draw them) the rise of each over the base. The re-measurement's own cost and its loss
   in float32 against float64 and at other thread counts.
2. The 150m preset at the GPU config's shape (GPT-2's 50,257-token vocabulary, 2,048-token
   sequences, random token ids): seconds per evaluation of sequences, and on `--device cuda` the
   GPU's loss against the CPU's on the same sequences.

    python bench/remeasure.py                   # CPU, about 5 minutes on 2 shared cores
    python bench/remeasure.py --device cuda     # on a GPU machine: the 150m rows on the GPU and its CPU
    python bench/remeasure.py --quick --output /tmp/remeasure.md   # seconds; every code path, meaningless numbers

`--quick` trains one segment (H = 15) instead of the run's H, evaluates the first 64 held-out sequences
and 200 windows' samples, and measures the tiny preset at a 512-token vocabulary and 64-token
sequences instead of the 150m shape.

The node's own modules are imported inside the CPU run's functions: the GPU rows need only torch,
tokenizers and transformers, which a GPU machine's image may hold without the node's dependencies.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
from _word_vocab import word_tokenizer

from distrai.train.determinism import configure_determinism, pinned_threads
from distrai.train.evaluate import COMPARED_BATCH, evaluate
from distrai.train.loss import next_token_logits, token_cross_entropy
from distrai.train.model import ModelSpec, load_model

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "remeasure.md"
MINERS = ("5miner0" + "x" * 40, "5miner1" + "x" * 40, "5miner2" + "x" * 40)
GPU_VOCAB, GPU_SEQ_LEN, GPU_SEQUENCES = 50257, 2048, 16
SECTION = re.compile(r"<!-- section: (\w+) -->")


@dataclasses.dataclass(frozen=True)
class Plan:
    inner_steps: int | None = None
    """H of the CPU run's miners; None: the run config's"""
    heldout: int | None = None
    """the CPU run's held-out sequences evaluated, the first ones; None: the whole split"""
    samples: int = 2000
    """windows' samples drawn to see how an aggregate's rise spreads"""
    preset: str = "150m"
    vocab: int = GPU_VOCAB
    seq_len: int = GPU_SEQ_LEN
    """the evaluated model's preset, vocabulary and sequence length (the GPU config's shape)"""

    @property
    def gpu_shape(self) -> bool:
        return (self.preset, self.vocab, self.seq_len) == ("150m", GPU_VOCAB, GPU_SEQ_LEN)


QUICK = Plan(inner_steps=15, heldout=64, samples=200, preset="tiny", vocab=512, seq_len=64)


def per_sequence_losses(model: torch.nn.Module, sequences: torch.Tensor, threads: int, dtype=torch.float32):
    """The mean next-token loss of each sequence, COMPARED_BATCH at a time, in `dtype`."""
    model = model.to(dtype)
    out = []
    with torch.no_grad(), pinned_threads(threads):
        for chunk in sequences.split(COMPARED_BATCH):
            logits = next_token_logits(model, chunk).to(dtype)
            out.extend(token_cross_entropy(logits, chunk[:, 1:]).mean(dim=1).tolist())
    model.to(torch.float32)
    return out


def honest_and_poisoned(rt):
    """The base, an honest aggregate's result and the colluding leader's result (one poisoned update)."""
    from distrai.protocol.globalmodel import outer_config
    from distrai.train.assignment import batch_indices
    from distrai.train.inner import inner_loop
    from distrai.train.outer import Contribution, OuterState, outer_step
    from miners.adversaries import poisoned

    base = rt.initial_params()
    rt.load_params(base)
    decoded = {}
    for m in MINERS:
        rt.load_params(base)

        def batch(t, m=m):
            cfg = rt.config.train
            return rt.data.batch(
                batch_indices(rt.run_id, 0, m, t, cfg.batch_size, rt.data.n_train, list(MINERS), rt.data.unit)
            )

        result = inner_loop(rt.model, batch, rt.loss_fn, rt.inner, keep_states=False)
        decoded[m] = result.pseudo_gradient
    outer = outer_config(rt.config.outer)

    def aggregate(updates):
        contributions = []
        for m, pg in updates.items():
            enc = rt.codec.encode(pg, None)
            contributions.append(
                Contribution(m, rt.codec.decode(enc.payload, enc.metadata, rt.shapes()), 1 / len(updates))
            )
        return outer_step(base, contributions, OuterState(momentum={}), outer).params

    return base, aggregate(decoded), aggregate({MINERS[0]: poisoned(decoded[MINERS[0]])})


def rises(before: list[float], after: list[float], count: int, samples: int) -> list[float]:
    from distrai.protocol.remeasure import heldout_sample, sample_seed

    out = []
    for window in range(samples):
        block_hash = f"0x{window:064x}"
        idx = heldout_sample(sample_seed(block_hash, "ab" * 32, window), len(before), count)
        b, a = statistics.fmean(before[i] for i in idx), statistics.fmean(after[i] for i in idx)
        out.append((a - b) / b)
    return out


def timed(fn, repeats: int = 3) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def cpu_run_rows(lines: list[str], plan: Plan) -> None:
    from distrai.localnet.network import local_runtime
    from distrai.protocol.remeasure import heldout_sample, sample_seed
    from distrai.protocol.run import load_run_config, shipped_config_path

    config = load_run_config(shipped_config_path("cpu-localnet"))
    run_h = config.train.inner_steps
    if plan.inner_steps is not None:
        config = config.model_copy(
            update={"train": config.train.model_copy(update={"inner_steps": plan.inner_steps})}
        )
    folder = tempfile.TemporaryDirectory(prefix="remeasure-")
    rt = local_runtime(config, Path(folder.name))
    count, tolerance = config.follow.heldout_sequences, config.follow.heldout_tolerance
    threads, samples = config.train.cpu_threads, plan.samples
    started = time.perf_counter()
    base, honest, poison = honest_and_poisoned(rt)
    trained_s = time.perf_counter() - started
    split = rt.data.heldout.shape[0]
    heldout = rt.data.heldout[: plan.heldout]
    losses = {}
    for name, params in (("base", base), ("honest", honest), ("poisoned", poison)):
        rt.load_params(params)
        losses[name] = per_sequence_losses(rt.model, heldout, threads)
    honest_rises = rises(losses["base"], losses["honest"], count, samples)
    poison_rises = rises(losses["base"], losses["poisoned"], count, samples)
    sigma = statistics.pstdev(honest_rises)
    idx = heldout_sample(sample_seed("0x" + "00" * 32, "ab" * 32, 0), heldout.shape[0], count)
    sample = heldout[idx]
    rt.load_params(base)
    cost = timed(
        lambda: evaluate(rt.model, sample, loss_fn=rt.loss_fn, batch_size=COMPARED_BATCH, cpu_threads=threads)
    )
    deltas = {}
    for name, params in (("base", base), ("honest", honest)):
        rt.load_params(params)
        ref = statistics.fmean(per_sequence_losses(rt.model, sample, threads, torch.float64))
        one = statistics.fmean(per_sequence_losses(rt.model, sample, 1))
        two = statistics.fmean(per_sequence_losses(rt.model, sample, 2))
        deltas[name] = (abs(one - ref) / ref, abs(two - one) / one)
    delta = max(max(d) for d in deltas.values())
    print(
        f"trained the honest miners in {trained_s:.0f} s; rises over {samples} samples measured", flush=True
    )
    evaluated = (
        "the whole held-out split" if heldout.shape[0] == split else f"{heldout.shape[0]} held-out sequences"
    )
    lines += [
        f"- the run: `distrai/configs/cpu-localnet.toml` ({sum(p.numel() for p in base.values()):,} parameters, "
        f"{split} held-out sequences of {heldout.shape[1]} tokens); `follow.heldout_sequences` = {count}, "
        f"`follow.heldout_tolerance` = {tolerance}; {samples} windows' samples (block hashes 0x0…0 to 0x0…{samples - 1:x})",
    ]
    if config.train.inner_steps != run_h or heldout.shape[0] != split:
        lines.append(
            f"- `--quick`: the miners train H = {config.train.inner_steps} steps (the run's H is {run_h}); "
            f"the losses are of the first {heldout.shape[0]} held-out sequences"
        )
    lines += [
        "",
        f"| aggregate | loss on {evaluated}: base → result | rise over the base, over the samples: min / median / max | standard deviation σ | samples refused |",
        "|---|---|---|---|---|",
    ]
    for name, values in (
        ("honest (3 miners)", honest_rises),
        ("colluding leader (1 poisoned update)", poison_rises),
    ):
        key = "honest" if name.startswith("honest") else "poisoned"
        refused = sum(r > tolerance for r in values)
        lines.append(
            f"| {name} | {statistics.fmean(losses['base']):.4f} → {statistics.fmean(losses[key]):.4f} | "
            f"{min(values):+.2%} / {statistics.median(values):+.2%} / {max(values):+.2%} | "
            f"{statistics.pstdev(values):.4f} | {refused} / {samples} |"
        )
    lines += [
        "",
        "| what | base | honest result |",
        "|---|---|---|",
        "| relative difference of the sample's loss, float32 (1 thread) against float64 | "
        f"{deltas['base'][0]:.1e} | {deltas['honest'][0]:.1e} |",
        "| relative difference, float32 at 2 threads against 1 | "
        f"{deltas['base'][1]:.1e} | {deltas['honest'][1]:.1e} |",
        "",
        f"- one evaluation of the sample ({count} × {heldout.shape[1]} tokens, {threads} thread): {cost * 1000:.1f} ms; "
        f"a window costs a follower two (the base's, once, and the followed result's) and one more per refused "
        f"aggregate that reached the recomputation: {2 * cost * 1000:.1f} ms",
        f"- a deliberately aimed aggregate (its expected rise set at the tolerance; it cannot know the sample) splits "
        f"two nodes whose losses differ by δ only if its rise lands within 2δ of the tolerance: with δ = {delta:.1e} "
        f"(the largest row above) and the spread σ = {sigma:.4f} of an honest aggregate's rise, about "
        f"2 · 2δ · φ(0) / σ = {4 * delta * 0.3989 / sigma:.1e} per window",
    ]


def gpu_shape_rows(
    lines: list[str], device: torch.device, cpu_threads: list[int], sequences: int, plan: Plan
) -> None:
    vocab, seq_len = plan.vocab, plan.seq_len
    tokenizer = word_tokenizer(vocab)
    spec = ModelSpec(preset=plan.preset, dtype="float32", attention="sdpa")
    generator = torch.Generator().manual_seed(0)
    batch = torch.randint(3, vocab, (sequences, seq_len), generator=generator)
    model = load_model(spec, tokenizer=tokenizer, device="cpu")
    n = sum(p.numel() for p in model.parameters())
    flops = 2 * n * sequences * seq_len
    shape = (
        f"preset 150m with the GPU config's vocabulary ({GPU_VOCAB:,} tokens)"
        if plan.gpu_shape
        else f"`--quick`: preset {plan.preset} with a vocabulary of {vocab:,} tokens (the GPU config's shape is "
        f"preset 150m, {GPU_VOCAB:,} tokens, sequences of {GPU_SEQ_LEN:,})"
    )
    lines += [
        f"- the model: {shape}: {n:,} parameters, "
        f"SDPA attention, float32; {sequences} random sequences of {seq_len} tokens, {COMPARED_BATCH} per forward",
        "",
        "| device | threads | seconds per evaluation | seconds for 16 sequences | tokens / s | FLOP/s (2 · params · tokens) |",
        "|---|---|---|---|---|---|",
    ]
    losses = {}
    for threads in cpu_threads:
        seconds = timed(
            lambda t=threads: evaluate(model, batch, batch_size=COMPARED_BATCH, cpu_threads=t), repeats=1
        )
        losses[f"cpu{threads}"] = evaluate(model, batch, batch_size=COMPARED_BATCH, cpu_threads=threads)
        per16 = seconds * GPU_SEQUENCES / sequences
        lines.append(
            f"| CPU | {threads} | {seconds:.1f} | {per16:.1f} | {sequences * seq_len / seconds:,.0f} | "
            f"{flops / seconds:.2e} |"
        )
        print(lines[-1], flush=True)
    if device.type == "cuda":
        on_gpu = model.to(device)
        full = torch.randint(3, vocab, (GPU_SEQUENCES, seq_len), generator=generator).to(device)

        def run():
            value = evaluate(on_gpu, full, batch_size=COMPARED_BATCH)
            torch.cuda.synchronize()
            return value

        seconds = timed(run)
        again = [run() for _ in range(2)]
        flops16 = 2 * n * GPU_SEQUENCES * seq_len
        lines.append(
            f"| {torch.cuda.get_device_name(device)} | — | {seconds:.2f} | {seconds:.2f} | "
            f"{GPU_SEQUENCES * seq_len / seconds:,.0f} | {flops16 / seconds:.2e} |"
        )
        gpu_loss = evaluate(on_gpu, batch.to(device), batch_size=COMPARED_BATCH)
        lines += [
            "",
            f"- the GPU repeats its loss bit for bit: {again[0] == again[1] == run()}; on the same {sequences} sequences "
            f"the GPU's loss {gpu_loss:.8f} and the CPU's "
            + ", ".join(f"{v:.8f} ({k[3:]} threads)" for k, v in losses.items())
            + ": relative differences "
            + ", ".join(f"{abs(gpu_loss - v) / v:.1e}" for v in losses.values()),
        ]


def write_section(output: Path, name: str, body: list[str]) -> None:
    text = output.read_text() if output.exists() else ""
    sections = {}
    header = [
        "# The held-out re-measurement: cost and numerics",
        "",
        "Written by `bench/remeasure.py`, one section per device it ran on; docs/protocol.md",
        '("Following an aggregate") draws its conclusions from these numbers.',
        "",
    ]
    if text:
        parts = SECTION.split(text)
        sections = {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts) - 1, 2)}
    sections[name] = "\n".join(body)
    out = header + [s for key in sorted(sections) for s in (f"<!-- section: {key} -->", sections[key], "")]
    output.write_text("\n".join(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--cpu-threads", type=int, nargs="+", default=[1, 2], help="CPU rows of the 150m shape"
    )
    parser.add_argument(
        "--sequences", type=int, default=1, help="sequences of the 150m shape evaluated on the CPU"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes (H = 15, the tiny preset): every code path, in seconds",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else Plan()
    device = torch.device(args.device)
    configure_determinism(device)
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    command = "python bench/remeasure.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [
        f"## {'GPU: ' + torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}",
        "",
        "```",
        command.strip(),
        "```",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {cpu[0] if cpu else 'unknown CPU'}, "
        f"{len(os.sched_getaffinity(0))} cores; torch {torch.__version__}; Python {platform.python_version()}",
    ]
    if device.type == "cpu":
        lines += ["", "### The shipped CPU run: honest and poisoned aggregates", ""]
        cpu_run_rows(lines, plan)
    shape = "The GPU config's shape" if plan.gpu_shape else "A tiny shape (`--quick`)"
    lines += ["", f"### {shape}: cost of one evaluation", ""]
    gpu_shape_rows(lines, device, args.cpu_threads, args.sequences, plan)
    write_section(args.output, device.type, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
