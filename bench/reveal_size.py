"""How many bytes a challenged miner's reveal takes once coded against the window's base; writes
docs/reveal-size.md.

    python bench/reveal_size.py --quick                  # seconds on a CPU: the tiny preset, for the smoke test
    python bench/reveal_size.py --device cpu --preset 150m --rows 1 --seq-len 256 --steps 40 80
    python bench/reveal_size.py --device cuda --preset 150m --steps 40 80     # the GPU config's batch
    python bench/reveal_size.py --device cuda --preset 1b --steps 20

It builds a preset model with the GPU config's vocabulary (`--vocab`, 50,257 by default) and trains
it from its initial weights (the window's base G_w) with the GPU config's step (`gpu-subnet.toml`:
fp32 master weights, bf16 autocast, fused AdamW, lr, betas, weight decay, clip, the pull toward the
base) on real text: the Python standard library's sources (`_corpus.py`) tokenized with a byte-level
BPE of at most `--vocab` tokens trained on them, read in order and repeated when used up. At every
step count of `--steps` it captures the boundary state, codes it against G_w as a challenged miner
reveals it (`distrai.train.coded_state`), decodes it, checks that the decoded state is the same bits
and hashes to the same state hash, and times both. After the last, it draws `trajectory_fraction` of
the parameter pieces and codes them as the trajectory reveal would: the pieces of θ_H against G_w
and the same pieces of the codec's residual (the run's topk codec applied to G_w − θ_H) as they are.
`--compare` also codes a sample of the state's byte planes with zlib and lzma beside zstd.

The table gives bytes per parameter by part: parameters (as differences from G_w), each AdamW moment,
the rest (step counters and the file's header), the state, and the trajectory sample, raw and coded.
A run writes one section per preset, device and batch, keeping the others and the notes.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import lzma
import math
import random
import shlex
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch
from _corpus import read_documents, stdlib_corpus, train_tokenizer
from _gpu_loops import sized_tokenizer
from _report import NOTES_MARKER, Machine, kept_notes

from distrai.codec import get_codec
from distrai.localnet.local_data import EOS
from distrai.protocol.run import load_run_config, shipped_config_path
from distrai.protocol.runtime import inner_config
from distrai.protocol.trajectory import param_pieces
from distrai.train.coded_state import decode_coded_state, encode_coded_state
from distrai.train.determinism import configure_determinism
from distrai.train.hashing import piece_of
from distrai.train.inner import InnerConfig, own_anchor, pseudo_gradient, run_steps
from distrai.train.loss import causal_lm_loss
from distrai.train.lossless import compress, delta_words, split_planes, words_of
from distrai.train.model import ModelSpec, load_model
from distrai.train.optimizer import BOUNDARY_MOMENTS, make_inner_optimizer
from distrai.train.tensorfile import decode_tensors
from distrai.train.train_state import TrainState, capture_state, state_hash, states_equal
from distrai.wire.blob_records import CodedStateRecord

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "reveal-size.md"
GPU_CONFIG = "gpu-subnet"
SECTION = "<!-- run: {} -->"
TITLE = "# Reveal size: a challenged miner's state, coded against the window's base"
CORPUS_BYTES = 16 << 20
PARTS = ("parameters", "exp_avg", "exp_avg_sq", "rest")


@dataclass(frozen=True)
class StateRow:
    step: int
    loss: float
    coded: dict[str, int]
    """coded bytes by part (PARTS), summing to the coded file's length"""
    raw_state_bytes: int
    zero_moments: float
    """share of the moments' entries that are exactly 0 (embedding rows of tokens not yet seen)"""
    encode_s: float
    decode_s: float


@dataclass(frozen=True)
class TrajectoryRow:
    pieces: int
    drawn: int
    elements: int
    raw: int
    coded_params: int
    coded_residual: int


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="150m")
    parser.add_argument(
        "--vocab", type=int, default=50257, help="the model's vocabulary (the GPU config's GPT-2 BPE)"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows", type=int, help="sequences per step (default: the GPU config's 32)")
    parser.add_argument("--seq-len", type=int, help="tokens per sequence (default: the GPU config's 2048)")
    parser.add_argument("--micro-batches", type=int, help="default: the GPU config's 4, or 1 below 4 rows")
    parser.add_argument(
        "--steps", type=int, nargs="+", default=[40, 80], help="boundaries to code, ascending"
    )
    parser.add_argument(
        "--boundary-moments",
        choices=BOUNDARY_MOMENTS,
        help="what a boundary keeps of AdamW's moments (default: the GPU config's `train.boundary_moments`)",
    )
    parser.add_argument("--compare", action="store_true", help="also zlib and lzma on a sample of the planes")
    parser.add_argument("--quick", action="store_true", help="the tiny preset, a few steps: seconds on a CPU")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    if args.quick:
        args.preset, args.vocab, args.rows, args.seq_len, args.steps = "tiny", 512, 2, 64, [4, 8]
        args.compare = True
    config = load_run_config(shipped_config_path(GPU_CONFIG))
    args.rows = args.rows or config.train.batch_size
    args.seq_len = args.seq_len or config.data.seq_len
    args.micro_batches = args.micro_batches or (config.train.micro_batches if args.rows >= 4 else 1)
    args.boundary_moments = args.boundary_moments or config.train.boundary_moments
    if args.steps != sorted(set(args.steps)) or args.steps[0] < 1:
        parser.error("--steps must be positive and ascending")
    return args


def token_stream(vocab: int, corpus_bytes: int, folder: Path) -> tuple[torch.Tensor, int]:
    """The corpus's documents tokenized one after the other with EOS between, and the BPE's size."""
    documents = read_documents(stdlib_corpus(corpus_bytes))
    tokenizer = train_tokenizer(documents, vocab, folder)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    ids = [token for doc in tokenizer(documents)["input_ids"] for token in [*doc, eos]]
    return torch.tensor(ids, dtype=torch.int64), len(tokenizer)


def batches(stream: torch.Tensor, rows: int, seq_len: int):
    """Consecutive `rows` × `seq_len` windows of the stream, from its start again when it runs out."""
    per_batch = rows * seq_len
    for start in itertools.count(0, per_batch):
        index = torch.arange(start, start + per_batch) % stream.numel()
        yield stream[index].reshape(rows, seq_len)


def step_config(args: argparse.Namespace, device: torch.device) -> InnerConfig:
    """The GPU config's inner step with this run's split; bf16 autocast where the device has it; a
    segment boundary at every step count measured (their greatest common divisor: the GPU config's 40
    for 40 and 200), so the moments are rounded where a miner's are when the config rounds them."""
    inner = inner_config(load_run_config(shipped_config_path(GPU_CONFIG)), "bench-reveal-size")
    autocast = inner.step.autocast
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        autocast = None
    step = dataclasses.replace(
        inner.step, micro_batches=args.micro_batches, autocast=autocast, cpu_threads=None
    )
    last = args.steps[-1]
    return dataclasses.replace(
        inner,
        inner_steps=last,
        segment_steps=math.gcd(*args.steps),
        step=step,
        boundary_moments=args.boundary_moments,
    )


def part_of(key: str) -> str:
    if key.startswith("param/"):
        return "parameters"
    entry = key.rpartition("/")[2]
    return entry if entry in ("exp_avg", "exp_avg_sq") else "rest"


def coded_parts(coded: bytes) -> dict[str, int]:
    """The coded file's bytes by part: each tensor's frames, the rest (small tensors, the header)."""
    tensors, _ = decode_tensors(coded, CodedStateRecord)
    parts = dict.fromkeys(PARTS, 0)
    for key, tensor in tensors.items():
        parts[part_of(key)] += tensor.numel()
    parts["rest"] += len(coded) - sum(parts.values())
    return parts


def code_state(state: TrainState, base: dict[str, torch.Tensor], loss: float) -> StateRow:
    started = time.perf_counter()
    coded = encode_coded_state(state, base)
    encoded = time.perf_counter()
    decoded = decode_coded_state(coded, base, max_bytes=4 * len(coded) + (64 << 30))
    decode_s = time.perf_counter() - encoded
    if not states_equal(decoded, state) or state_hash(decoded) != state_hash(state):
        raise SystemExit(f"step {state.step}: the decoded state is not the coded one")
    moments = [v for k, v in state.optimizer.items() if v.dim() > 0]
    zeros = sum(int((v == 0).sum()) for v in moments) / max(1, sum(v.numel() for v in moments))
    raw = sum(v.numel() * v.element_size() for v in [*state.params.values(), *state.optimizer.values()])
    return StateRow(state.step, loss, coded_parts(coded), raw, zeros, encoded - started, decode_s)


def code_trajectory(
    last: TrainState, base: dict[str, torch.Tensor], residual: dict[str, torch.Tensor], fraction: float
) -> TrajectoryRow:
    """Code a drawn `fraction` of the parameter pieces of θ_H (against G_w) and of the residual."""
    refs = list(param_pieces(last.params).values())
    drawn = random.Random(0).sample(refs, math.ceil(fraction * len(refs)))
    params = residuals = elements = 0
    for ref in drawn:
        mine = piece_of(last.params[ref.name], ref.index)
        params += sum(
            len(compress(p)) for p in split_planes(delta_words(mine, piece_of(base[ref.name], ref.index)))
        )
        kept = piece_of(residual[ref.name], ref.index)
        residuals += sum(len(compress(p)) for p in split_planes(words_of(kept)))
        elements += mine.numel()
    raw = sum(piece_of(last.params[r.name], r.index).numel() * 4 for r in drawn) * 2
    return TrajectoryRow(len(refs), len(drawn), elements, raw, params, residuals)


def compare_compressors(state: TrainState, base: dict[str, torch.Tensor]) -> list[list[str]]:
    """Bytes per element and MB/s of zstd, zlib and lzma on the byte planes of each tensor's first
    piece (2^20 elements, or the whole of a smaller tensor)."""
    planes: dict[str, list[bytes]] = {part: [] for part in PARTS[:3]}
    for name, value in state.params.items():
        planes["parameters"] += split_planes(delta_words(piece_of(value, 0), piece_of(base[name], 0)))
    for key, value in state.optimizer.items():
        if part_of(key) in planes:
            planes[part_of(key)] += split_planes(words_of(piece_of(value, 0)))
    compressors = {
        "zstd level 1": lambda b: compress(b, 1),
        "zstd level 3": lambda b: compress(b, 3),
        "zlib level 6": lambda b: zlib.compress(b, 6),
        "lzma preset 1": lambda b: lzma.compress(b, preset=1),
    }
    rows = []
    for label, fn in compressors.items():
        cells = [label]
        total_in = total_out = 0
        started = time.perf_counter()
        for chunks in planes.values():
            out = sum(len(fn(c)) for c in chunks)
            cells.append(f"{out / (sum(map(len, chunks)) / 4):.3f}")
            total_in, total_out = total_in + sum(map(len, chunks)), total_out + out
        seconds = time.perf_counter() - started
        cells += [f"{total_out / (total_in / 4):.3f}", f"{total_in / 1e6 / seconds:,.0f}"]
        rows.append(cells)
    return rows


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---:|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def state_table(rows: list[StateRow], n_params: int) -> str:
    per = [[*(r.coded[p] / n_params for p in PARTS), sum(r.coded.values()) / n_params] for r in rows]
    return markdown_table(
        [
            "step",
            "loss",
            "parameters",
            "exp_avg",
            "exp_avg_sq",
            "rest",
            "state, coded",
            "state, raw",
            "moments = 0",
            "code (s)",
            "decode (s)",
        ],
        [
            [
                f"{r.step}",
                f"{r.loss:.3f}",
                *(f"{x:.3f}" for x in p),
                f"{r.raw_state_bytes / n_params:.3f}",
                f"{100 * r.zero_moments:.1f}%",
                f"{r.encode_s:.1f}",
                f"{r.decode_s:.1f}",
            ]
            for r, p in zip(rows, per, strict=True)
        ],
    )


def section(
    args, key, machine, device_name, n_params, bpe_size, stream_tokens, rows, trajectory, compared, fraction
):
    command = "python bench/reveal_size.py " + shlex.join(sys.argv[1:])
    last = rows[-1]
    state_coded = sum(last.coded.values()) / n_params
    t = trajectory
    traj_coded = (t.coded_params + t.coded_residual) / n_params
    lines = [
        SECTION.format(key),
        f"## {args.preset}, {device_name}, {args.rows} × {args.seq_len} tokens a step, {args.boundary_moments} moments",
        "",
        f"`{command}` ({datetime.now(UTC).strftime('%Y-%m-%d')}; {machine.cpu}, {machine.cores} cores, "
        f"torch {machine.torch}). {n_params:,} parameters (preset `{args.preset}`, vocabulary {args.vocab:,}); "
        f"data: {stream_tokens:,} tokens of the standard library's sources in a BPE of {bpe_size:,} tokens, "
        f"{args.rows} × {args.seq_len} tokens a step in {args.micro_batches} micro-batch(es); AdamW's moments "
        + (
            f"rounded to bfloat16 at every boundary (every {math.gcd(*args.steps)} steps). "
            if args.boundary_moments == "bfloat16"
            else "kept in float32. "
        )
        + "Bytes per parameter of one boundary state, coded against G_w; every decoded state was checked "
        "bit for bit and against its state hash:",
        "",
        state_table(rows, n_params),
        "",
        f"Trajectory sample at step {last.step}: {t.drawn} of {t.pieces} parameter pieces ({fraction:g}), "
        f"{t.elements:,} elements: raw {t.raw / n_params:.3f} B/param (fp32 θ_H and residual), coded "
        f"{t.coded_params / n_params:.3f} (θ_H against G_w) + {t.coded_residual / n_params:.3f} (residual) = "
        f"{traj_coded:.3f} B/param.",
        "",
        f"**A challenged miner's reveal beyond its update at step {last.step}: {state_coded:.2f} (state, coded) "
        f"+ {traj_coded:.2f} (trajectory, coded) = {state_coded + traj_coded:.2f} B/param**, against "
        f"{last.raw_state_bytes / n_params + t.raw / n_params:.2f} raw.",
    ]
    if compared:
        lines += [
            "",
            "Compressors on the byte planes of each tensor's first 2^20 elements at the last step (bytes per "
            "element; throughput of the input, one thread):",
            "",
            markdown_table(["compressor", "parameters", "exp_avg", "exp_avg_sq", "all", "MB/s"], compared),
        ]
    return "\n".join(lines) + "\n"


def write_report(path: Path, key: str, text: str) -> None:
    """Put this run's section in place of the one of the same key, keeping the others and the notes."""
    sections: dict[str, str] = {}
    if path.exists():
        body = path.read_text().partition(NOTES_MARKER)[0]
        for chunk in body.split("<!-- run: ")[1:]:
            name, _, rest = chunk.partition(" -->\n")
            sections[name] = SECTION.format(name) + "\n" + rest.rstrip() + "\n"
    notes = kept_notes(path)
    sections[key] = text
    intro = (
        f"{TITLE}\n\nWritten by `bench/reveal_size.py` (its docstring says what it runs); one section per "
        "preset, device and batch.\n"
    )
    path.write_text(
        intro + "\n" + "\n".join(sections[k] for k in sorted(sections)) + "\n" + NOTES_MARKER + "\n" + notes
    )


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    configure_determinism(device)
    config = load_run_config(shipped_config_path(GPU_CONFIG))
    with tempfile.TemporaryDirectory() as folder:
        stream, bpe_size = token_stream(args.vocab, CORPUS_BYTES >> (4 if args.quick else 0), Path(folder))
    model = load_model(
        ModelSpec(preset=args.preset, dtype=config.model.dtype, attention=config.model.attention),
        tokenizer=sized_tokenizer(args.vocab),
        device=str(device),
    )
    n_params = sum(p.numel() for p in model.parameters())
    base = {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}
    inner = step_config(args, device)
    optimizer = make_inner_optimizer(model, inner.optimizer)
    anchor = own_anchor(model, inner)
    data = batches(stream, args.rows, args.seq_len)
    rows: list[StateRow] = []
    done = 0
    for target in args.steps:
        results = run_steps(
            model, optimizer, itertools.islice(data, target - done), causal_lm_loss, inner, done, anchor
        )
        done = target
        row = code_state(capture_state(model, optimizer, done), base, results[-1].loss)
        rows.append(row)
        print(
            f"step {done}: state coded {sum(row.coded.values()) / n_params:.3f} B/param "
            f"({', '.join(f'{p} {row.coded[p] / n_params:.3f}' for p in PARTS)}); "
            f"code {row.encode_s:.1f} s, decode {row.decode_s:.1f} s",
            flush=True,
        )
    last = capture_state(model, optimizer, done)
    codec = get_codec(config.codec.name, **dict(config.codec.options))
    residual = codec.encode(pseudo_gradient(base, last.params)).residual
    fraction = config.verification.trajectory_fraction
    trajectory = code_trajectory(last, base, residual, fraction)
    compared = compare_compressors(last, base) if args.compare else None
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    key = (
        f"{args.preset} {device.type} {args.rows}x{args.seq_len} steps {'-'.join(map(str, args.steps))} "
        f"moments {args.boundary_moments}"
    )
    text = section(
        args,
        key,
        Machine.here(),
        device_name,
        n_params,
        bpe_size,
        stream.numel(),
        rows,
        trajectory,
        compared,
        fraction,
    )
    print(text)
    write_report(args.output, key, text)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
