"""Smoke tests of bench/convergence.py and bench/incentives.py.

bench/convergence.py: a `--quick` run on both corpora (the templated built-in one and
real text from the Python standard library), with torchft's DiLoCo as the peer, writes a
well-formed, self-consistent report.

The numbers of a quick run mean nothing; what is checked is the report's shape and the accounting
that follows from first principles: a ring all-reduce sends 2·(N−1)/N fp32 values per parameter
per step, an uncompressed DiLoCo upload is 4 bytes per parameter per round (the peer's ring
all-reduce of it 2·(N−1)/N · 4 bytes), nats per byte are nats per token over bytes per token, and
the peer's target line follows from the rows. Then, in this process: the real-text corpus is a
fixed list pinned by its hash, a run does not replace numbers measured on another corpus, a run
keeps the sections of the corpora it did not run, and the benchmark imports torchft only for the
peer, which without torchft is refused with the install command.

bench/incentives.py: a `--quick` run writes every table of docs/incentives.md, each target's verdict
follows from its numbers (the lives of row d under a rule that pays at once say MISSED), and the
validator's cost is split by resource.
"""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.bench_jobs import KEPT, MARKER, bench_module

ROOT = Path(__file__).resolve().parent.parent
HEX64 = r"[0-9a-f]{64}"


def table_after(text: str, heading: str) -> list[list[str]]:
    """The cells of the markdown table in the section under `heading` (up to the next heading of the
    same or a higher level), header row first."""
    level = len(heading) - len(heading.lstrip("#"))
    section = re.split(rf"\n#{{1,{level}}} ", text.split(heading, 1)[1], maxsplit=1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    return [cells[0], *cells[2:]]


def corpus_section(text: str, corpus: str) -> str:
    """The report's section of `corpus`, up to the next corpus section or the notes."""
    rest = text.split(f"<!-- corpus: {corpus} -->\n", 1)[1]
    return re.split(r"<!-- (?:corpus: \w+|Notes below)", rest, maxsplit=1)[0]


def number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("×%"))


@pytest.fixture(scope="module")
def report(convergence_bench) -> tuple[str, subprocess.CompletedProcess]:
    """The quick run of `support.bench_jobs.start_convergence_bench`, run beside the other tests."""
    run = convergence_bench.completed()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return convergence_bench.report.read_text(), run


def test_report_names_the_command_and_keeps_notes(report):
    text, _ = report
    for corpus in ("templated", "real"):
        assert (
            "bench/convergence.py --quick --corpus templated real --peer torchft --sweep --output"
            in corpus_section(text, corpus)
        )
    assert "# old report" not in text
    assert text.endswith(f"{MARKER}\n{KEPT}")
    assert text.index("## Templated corpus") < text.index("## Real text") < text.index(MARKER)


@pytest.mark.parametrize("corpus", ["templated", "real"])
def test_convergence_table_is_complete_and_consistent(report, corpus):
    text = corpus_section(report[0], corpus)
    header, *rows = table_after(text, "### Convergence and traffic")
    assert header[:8] == [
        "method",
        "H × rounds",
        "held-out loss",
        "nats / byte",
        "ratio to DDP",
        "bytes / param / worker (run)",
        "reduction vs DDP",
        "wall time (s)",
    ]
    methods = [row[0] for row in rows]
    shipped = ["DiLoCo as shipped"] if corpus == "real" else []
    assert methods == [
        "DDP (all-reduce every step)",
        "DiLoCo fp32",
        "DiLoCo + int8",
        "DiLoCo + top-k",
        *shipped,
        "torchft DiLoCo (peer)",
    ]
    ddp, fp32, int8, topk, *_, peer = rows
    bytes_per_token = float(re.search(r"([\d.]+) bytes of text per held-out token", text).group(1))
    for row in rows:
        assert len(row) == len(header)
        loss, per_byte, ratio, sent, reduction, seconds = (number(row[i]) for i in range(2, 8))
        assert math.isfinite(loss) and loss > 0 and seconds >= 0
        assert per_byte == pytest.approx(loss / bytes_per_token, rel=2e-3)
        assert ratio == pytest.approx(loss / number(ddp[2]), abs=1e-3)
        assert reduction == pytest.approx(number(ddp[5]) / sent, rel=0.01, abs=0.6)
    workers = int(text.split(" workers, batch")[0].rsplit("- ", 1)[1])
    steps = int(text.split(" steps per worker")[0].rsplit(", ", 1)[1])
    assert number(ddp[5]) == pytest.approx(2 * (workers - 1) / workers * 4 * steps)
    h, rounds = (int(part) for part in fp32[1].split(" × "))
    assert h * rounds == steps
    assert number(fp32[5]) == pytest.approx(4.0 * rounds)
    int8_rounds = int(int8[1].split(" × ")[1])
    assert int8_rounds <= number(int8[5]) < 1.1 * int8_rounds
    assert number(topk[5]) < number(int8[5])
    for line in ("Traffic, DiLoCo + int8", "Traffic, DiLoCo + top-k", "Held-out loss, DiLoCo fp32"):
        assert line in text
    assert peer[1] == fp32[1] and peer[8] == "peer (reference)"
    assert number(peer[5]) == pytest.approx(2 * (workers - 1) / workers * 4 * rounds)
    assert "Held-out loss, torchft DiLoCo (peer)" not in text
    stated = re.search(
        r"Held-out loss, DiLoCo fp32: ([\d.]+)× the peer's; target ≤ 1\.01×: (met|MISSED)\.", text
    )
    ratio = number(fp32[2]) / number(peer[2])
    assert float(stated.group(1)) == pytest.approx(ratio, abs=1e-3)
    if abs(ratio - 1.01) > 1e-3:
        assert stated.group(2) == ("met" if ratio <= 1.01 else "MISSED")


def test_the_sweep_varies_one_shipped_setting_a_row_and_names_the_best(report):
    """The real text's sweep: the shipped row (the GPU config's codec, outer step and pipelining, as
    the setup lines say) first, then one row per setting of `_config.sweep_choices`, each the shipped
    combination with one thing changed; its ratios follow from the losses, and the decision names the
    row with the lowest loss and the shipped one's rank."""
    config = bench_module("_config")
    from distrai.protocol.run import load_run_config, shipped_config_path

    run = load_run_config(shipped_config_path(config.SHIPPED_CONFIG))
    text = corpus_section(report[0], "real")
    assert "### The shipped combination" not in corpus_section(report[0], "templated")
    ddp = number(table_after(text, "### Convergence and traffic")[1][2])
    shipped_line = next(line for line in text.splitlines() if line.startswith("  - DiLoCo as shipped:"))
    assert f"`{run.codec.name}`" in shipped_line and "pipelined" in shipped_line
    momentum = f"momentum {run.outer.momentum}" if run.outer.momentum else "no momentum"
    assert f"SGD lr {run.outer.lr}, {momentum}" in shipped_line
    header, first, *sweep = table_after(text, "### The shipped combination and the sweep around it")
    assert header[0] == "setting" and first[0] == "as shipped"
    assert [number(c) for c in first[1:4]] == [run.outer.lr, run.outer.momentum, run.codec.options["decay"]]
    assert first[4] == ("pipelined" if run.windows.pipelined else "sequential")
    lrs, momenta = config.SWEEP_OUTER
    expected = len(lrs) * len(momenta) + len(config.SWEEP_DECAYS) + 1 - 2
    assert len(sweep) == expected
    for row in sweep:
        changed = [i for i in range(1, 5) if row[i] != first[i]]
        assert len(changed) in (1, 2) and (len(changed) == 1 or changed == [1, 2]), row
    losses = {row[0]: number(row[5]) for row in (first, *sweep)}
    for row in (first, *sweep):
        assert number(row[6]) == pytest.approx(number(row[5]) / ddp, abs=1e-3)
        assert number(row[7]) == pytest.approx(number(row[5]) / number(first[5]), abs=1e-3)
    rank = 1 + sorted(losses.values()).index(losses["as shipped"])
    stated = re.search(
        r"Lowest held-out loss: (.+?) \(([\d.]+),.*?; with the shipped (\w+) windows, what the outer step and the "
        r"codec can change: (.+?) \(([\d.]+),.*ranks (\d+) of (\d+)\.",
        text,
    )
    same = {row[0]: losses[row[0]] for row in (first, *sweep) if row[4] == first[4]}
    for (name, loss), pool in ((stated.group(1, 2), losses), (stated.group(4, 5), same)):
        best = min(pool, key=pool.get)
        assert name == ("the shipped combination" if best == "as shipped" else best)
        assert number(loss) == pytest.approx(pool[best], abs=1e-4)
    assert stated.group(3) == first[4]
    assert (int(stated.group(6)), int(stated.group(7))) == (rank, len(losses))


def test_real_text_section_pins_its_corpus_tokenizer_and_shards(report):
    text = corpus_section(report[0], "real")
    files = int(re.search(r"one document per file: (\d+) files", text).group(1))
    listed = text.split("</summary>", 1)[1].split("</details>", 1)[0].strip().split(", ")
    assert len(listed) == files and listed == sorted(listed)
    assert not any(part.startswith("test") for name in listed for part in name.split("/"))
    for what in ("corpus", "tokenizer", "manifest"):
        assert re.search(rf"{what} sha256 `{HEX64}`", text), what
    assert "byte-level BPE with 384 tokens" in text
    shards = int(re.search(r"training tokens in (\d+) shards", text).group(1))
    assert shards > 10
    assert "### Inner-loop throughput" not in text


def test_distillation_and_throughput_tables(report):
    text, run = report
    for corpus in ("templated", "real"):
        _, teacher, plain, distilled = table_after(
            corpus_section(text, corpus), "### Distillation versus plain pre-training"
        )
        for row in (teacher, plain, distilled):
            assert math.isfinite(number(row[1])) and number(row[1]) > 0
    _, bare, *inner = table_after(corpus_section(text, "templated"), "### Inner-loop throughput")
    assert bare[0] == "bare PyTorch loop" and inner
    for row in inner:
        assert number(row[2]) == pytest.approx(100 * number(row[1]) / number(bare[1]), abs=0.1)
    assert "convergence and traffic" in run.stdout


def test_corpus_is_a_fixed_list_pinned_by_its_hash(tmp_path):
    corpus = bench_module("_corpus")
    root = tmp_path / "lib"
    for name, text in {
        "a.py": "x = 1\n",
        "pkg/b.py": "def f():\n    return 2\n",
        "pkg/empty.py": "\n",
        "test/c.py": "y = 3\n",
        "pkg/test_d.py": "z = 4\n",
        "site-packages/e.py": "w = 5\n",
        "latin.py": "s = '\xe9'\n",
    }.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("latin-1"))
    first = corpus.stdlib_corpus(1000, root)
    assert first.files == ("a.py", "pkg/b.py")
    assert first == corpus.stdlib_corpus(1000, root)
    assert corpus.stdlib_corpus(10, root).files == ("a.py",)
    (root / "pkg" / "b.py").write_text("def f():\n    return 3\n")
    assert corpus.stdlib_corpus(1000, root).sha256 != first.sha256
    (root / "pkg" / "b.py").rename(root / "pkg" / "b2.py")
    assert corpus.stdlib_corpus(1000, root).sha256 != first.sha256


def test_token_bytes_counts_text_bytes():
    corpus = bench_module("_corpus")
    from distrai.data.byte_tokenizer import BYTE_VOCAB_SIZE, byte_tokenizer

    counts = corpus.token_bytes(byte_tokenizer())
    assert counts == [1] * 256 + [0] * (BYTE_VOCAB_SIZE - 256)


def test_a_run_on_another_corpus_is_refused_and_other_sections_are_kept(tmp_path):
    report = bench_module("_report")
    convergence = bench_module("convergence")
    output = tmp_path / "benchmarks.md"
    old_real = "<!-- corpus: real -->\n## Real text\n\n- corpus sha256 `" + "0" * 64 + "`\n"
    old_templated = "<!-- corpus: templated -->\n## Templated corpus\n\nold templated numbers\n"
    output.write_text(f"# Benchmarks\n\n{old_templated}\n{old_real}\n{MARKER}\n{KEPT}")
    assert report.recorded_corpus_sha256(output) == "0" * 64
    with pytest.raises(SystemExit, match="not compared"):
        convergence.main(["--quick", "--corpus", "real", "--output", str(output)])

    new_real = "<!-- corpus: real -->\n## Real text\n\nnew real numbers\n"
    text = report.markdown({"real": new_real}, output)
    assert old_templated in text and new_real in text and "0" * 64 not in text
    assert text.endswith(f"{MARKER}\n{KEPT}")
    assert text.startswith(report.INTRO)


def test_torchft_is_imported_only_for_the_peer(tmp_path, monkeypatch):
    probe = (
        "import sys; sys.path.insert(0, 'bench'); import convergence, _ranks, _report, _peer_torchft; "
        "assert 'torchft' not in sys.modules, 'torchft imported'"
    )
    subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True)
    convergence = bench_module("convergence")
    monkeypatch.setitem(sys.modules, "torchft", None)
    with pytest.raises(SystemExit, match=re.escape("pip install -e .[bench]")):
        convergence.main(["--quick", "--peer", "torchft", "--output", str(tmp_path / "benchmarks.md")])
    assert not (tmp_path / "benchmarks.md").exists()


# -- bench/incentives.py -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def incentives(incentives_bench) -> str:
    """The quick run of `support.bench_jobs.start_incentives_bench`, run beside the other tests."""
    run = incentives_bench.completed()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Targets" in run.stdout
    return incentives_bench.report.read_text()


def test_incentives_report_names_its_command_and_keeps_notes(incentives):
    assert "python bench/incentives.py --quick --output" in incentives
    assert "- date: " in incentives and "- machine: " in incentives
    assert "# old report" not in incentives and incentives.endswith(f"{MARKER}\n{KEPT}")


def test_incentives_targets_follow_from_their_numbers(incentives):
    header, *rows = table_after(incentives, "## Targets")
    assert header == ["row", "measured", "target", "verdict"]
    assert [row[0][:2] for row in rows] == ["a.", "b.", *["c."] * 3, *["d."] * 7, "e.", "f.", "f.", "f."]
    verdicts = {row[0]: row[3] for row in rows}
    _, *speeds = table_after(incentives, "## a. Pay per token by speed")
    per_token = {row[0]: number(row[6]) for row in speeds}
    four = [per_token[label] for label in ("¼×", "1×", "4×", "2 ranks")]
    assert per_token["1×"] == 1.0
    a = verdicts["a. pay per token by speed"]
    assert a == ("MET" if min(four) > 0 and max(four) / min(four) <= 1.10 + 0.01 else "MISSED")
    _, *splits = table_after(incentives, "## b. Splitting")
    assert [row[1] for row in splits] == ["1", "2", "4"] and len({row[3] for row in splits}) == 1
    ratios = [number(row[5]) for row in splits]
    assert ratios[0] == 1.0
    assert verdicts["b. splitting the 4× compute"] == (
        "MET" if all(abs(r - 1) <= 0.10 for r in ratios) else "MISSED"
    )
    gate, exponent, scaled = (row for row in rows if row[0].startswith("c."))
    failed, cells = map(int, re.match(r"(\d+) of (\d+) honest", gate[1]).groups())
    assert gate[3] == ("MET" if failed / cells <= 0.01 else "MISSED")
    lowest = float(
        re.search(r"gain per unit of work (-?[\d.]+|nan) of its window's median", gate[1]).group(1)
    )
    assert failed > 0 or not lowest < 0.25, gate  # an honest window below the floor is docked
    assert re.match(r"exponent (-?[\d.]+|nan) \(the run config's `gain_exponent`: 0.3\)", exponent[1]), (
        exponent
    )
    assert scaled[0].startswith("c. own update × 0.0001") and scaled[2].startswith("≤ 0.0001")
    assert scaled[3] == ("MET" if float(scaled[1]) <= 1e-4 else "MISSED"), scaled
    for row in rows:
        if row[0].startswith("d.") and "the worst" not in row[0]:
            ratio = float(row[1].split(" of honest")[0])
            bound = 0.05 if "copier" in row[0] else 1.0
            assert row[3] == ("MET" if (ratio <= bound if bound < 1 else ratio < bound) else "MISSED"), row
        if row[0].startswith("f."):
            target = number(re.search(r"≤ ([\d.]+%)", row[2]).group(1)) / 100
            assert row[3] == ("MET" if number(row[1]) / 100 <= target + 5e-4 else "MISSED"), row


def test_incentives_gate_table_is_every_window_of_every_miner(incentives):
    header, *rows = table_after(incentives, "## c. The gate")
    windows = [h for h in header if h.startswith("window ")]
    assert len(windows) >= 2 and header[-1] == "failed"
    labels = [row[0] for row in rows]
    assert {
        "¼×",
        "1×",
        "4×",
        "2 ranks",
        "inflater, 2×",
        "inflater, H",
        "last segment only",
        "copier",
        "own update × 0.0001",
    } <= set(labels)
    for row in rows:
        cells = row[2 : 2 + len(windows)]
        assert all(re.match(r"(pass|FAIL|paid [\d.e-]+) \(", cell) for cell in cells), row
        assert int(row[-1]) == sum(cell.startswith("FAIL") for cell in cells)
    trains, claims = map(int, rows[labels.index("inflater, 2×")][1].split(" / "))
    assert claims == 2 * trains


def test_incentives_lives_follow_the_gpu_config(incentives):
    header, *rows = table_after(incentives, "## d. Claims beyond the work")
    assert header[-1] == "verdict" and len(rows) == 6
    by_label = {row[0]: row for row in rows}
    trains, claims = by_label["inflater, H"][1].split(" / ")
    assert (int(trains), int(claims)) == (46, 400)
    for row in rows:
        ratio = float(row[5])
        copier = "copier" in row[0]
        assert row[-1] == ("MET" if (ratio <= 0.05 if copier else ratio < 1) else "MISSED"), row
        probation, later = map(float, row[3].split(" / "))
        assert 0 < later <= probation <= 1


def test_the_lives_table_says_missed_under_a_rule_that_pays_at_once():
    """Row d can fail: the quick run's `--maturity-windows 0` pays a window at once, and the cheats
    that a maturing pay keeps below honest work then earn more than it."""
    lives = bench_module("_incentive_lives")
    from distrai.protocol.run import load_run_config, shipped_config_path

    rule = lives.gpu_rule(load_run_config(shipped_config_path("gpu-subnet")))
    at_once = [lives.life(dataclasses.replace(rule, maturity=0), c, 200, 100) for c in lives.cheats(rule)]
    assert not all(row.met for row in at_once)
    assert lives.worst_claim(dataclasses.replace(rule, maturity=0)).ratio > 1


def test_incentives_validator_cost_is_split_by_resource(incentives):
    _, *rows = table_after(incentives, "## f. A validator's cost per window")
    parts = {row[0]: row for row in rows}
    share = {name: number(row[4]) / 100 for name, row in parts.items()}
    assert share["replays"] == pytest.approx(
        (40 + 0.5 * 40) / 1840, abs=5e-5
    )  # its replay, half a receipt again
    for resource in ("GPU", "CPU", "link"):
        chosen = [
            s for name, s in share.items() if parts[name][1] == resource and not name.startswith("all ")
        ]
        assert share[f"all {resource}"] == pytest.approx(sum(chosen), abs=2e-4)
        assert parts[f"all {resource}"][-1] in ("MET", "MISSED")


def test_incentives_aggregation_table_compares_the_rules(incentives):
    header, *rows = table_after(incentives, "## e. The aggregate's rule")
    assert [row[0] for row in rows] == ["by measured gain (the run's)", "by claimed tokens (before)"]
    claims = float(rows[1][-2])
    for row in rows:
        assert math.isfinite(float(row[-2])) and float(row[-2]) > 0
        assert float(row[-1]) == pytest.approx(float(row[-2]) - claims, abs=2e-4)


def test_pay_follows_the_scores_and_matures_whatever_the_split():
    windows, pay = bench_module("_incentive_windows"), bench_module("_incentive_pay")
    miners = [
        windows.Miner(label, f"hotkey-{label}", steps) for label, steps in (("a", 10), ("b", 40), ("c", 20))
    ]

    def record(window: int, failed: set[str]):
        return windows.WindowRecord(
            window=window,
            miners={
                m.hotkey: windows.MinerWindow(
                    m.steps, m.steps * 512, 0.0 if m.label in failed else m.steps * 512.0, {}, 0, None
                )
                for m in miners
            },
            heldout=None,
            clip_factors={},
        )

    full = pay.miner_pay([record(w, set()) for w in (1, 2, 3, 4)], miners, alpha=0.3, maturity=1)
    per_token = [full[m.label].pay_per_token for m in miners]
    assert pay.spread(per_token) == pytest.approx(0.0, abs=1e-12)
    assert full["b"].tokens == 3 * 40 * 512  # the last window has not matured
    nothing = pay.miner_pay([record(1, set())], miners, alpha=0.3, maturity=1)
    assert all(x.pay == 0.0 for x in nothing.values())  # nothing matured yet: nothing paid
    unpaid = pay.miner_pay(
        [record(1, {"b"}), record(2, set()), record(3, set())], miners, alpha=0.3, maturity=1
    )
    assert unpaid["b"].unpaid_windows == 1 and unpaid["b"].pay_per_token < unpaid["a"].pay_per_token
    assert pay.spread([1.0, 0.0]) == math.inf


def test_scale_accounting_counts_a_validators_share_of_the_measurements():
    accounting = bench_module("_scale_accounting")
    from distrai.protocol.run import load_run_config, shipped_config_path

    gpu = load_run_config(shipped_config_path("gpu-subnet"))
    shared = accounting.account(gpu, 256, 16, 1840, params=257_092_608)
    assert shared.measured_per_validator == 256 // 16 + gpu.scoring.score_rechecks * 15
    alone = accounting.account(gpu, 256, 1, 1840, params=257_092_608)
    assert alone.measured_per_validator == 256
    assert alone.scoring_share > 5 * shared.scoring_share  # 256 updates against 16 + 15 re-checks
