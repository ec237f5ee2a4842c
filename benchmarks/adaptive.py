"""What a delivery channel or a defence does to the pixel attacks: bare, non-adaptive and adaptive side by side.

(a) Channel (default `--channel jpeg:75`), per zoo level (32 questions per task family, eps 8/255, the paper
    protocol: 40 PGD steps, no early stopping, the paper's five attacks): one audit holds the bare model and the
    model behind the channel; printed per pixel attack, with 95% question-bootstrap CIs, the ASR bare (the bare
    model's C), non-adaptive (the bare model's own perturbations sent through the channel) and adaptive (attacked
    through it: Pillow's JPEG in the forward pass, kornia's differentiable JPEG for the gradient), both over the
    channel's C; then R+ the same three ways. The check the issue asks for: adaptive at least twice the
    non-adaptive figure, or within 10 points of the bare model's.
(b) Randomised defence (default `--defence noise:16`, Gaussian noise of twice eps), End-PGD behind it with EOT
    over 1 and over 10 draws per step (each its own audit, the same questions, `--adaptive-only`): ASR with CIs and
    the model passes per question each spent.

Every figure is read from the audits' own summaries (the same numbers `mmaudit report` prints).

Run: .venv/bin/python benchmarks/adaptive.py [--levels L1,L2,L3] [--n 32] [--channel jpeg:75]
     [--defence noise:16] [--eot 1,10] [--skip-eot] [--json FILE] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import mmaudit
from mmaudit.pathways import registry


def pct(t) -> str:
    return "n/a" if not t else f"{100 * t[0]:5.1f} [{100 * t[1]:5.1f}, {100 * t[2]:5.1f}]"


def channel_run(level: str, n: int, channel: str, out: Path) -> dict:
    t0 = time.perf_counter()
    result = mmaudit.audit(f"zoo:{level}", f"synthetic:{n}", out=out / f"{level}-channel", channel=channel,
                           paper_protocol=True, recovery=0, ocr_limit=0, wrong_ocr="off")
    (row,) = result.summary["channels"]["models"]
    rows = [{"attack": a["attack"]} | {k: a[k] for k in ("bare", "non_adaptive", "adaptive")} for a in row["attacks"]]
    rows.append({"attack": "r_plus"} | row["r_plus"])
    for r in rows:
        a, na, b = (r[k][0] if r[k] else float("nan") for k in ("adaptive", "non_adaptive", "bare"))
        r["meets"] = bool(a >= 2 * na or a >= b - 0.10)
    print(f"\n(a) zoo {level} behind --channel {channel}: |C| bare {row['bare_n_correct']}, behind the channel "
          f"{row['n_correct']} of {3 * n}; {time.perf_counter() - t0:.0f} s")
    print(f"  {'attack':9} {'bare':22} {'non-adaptive':22} {'adaptive':22} adaptive/non-adaptive  check")
    for r in rows:
        ratio = r["adaptive"][0] / r["non_adaptive"][0] if r["non_adaptive"] and r["non_adaptive"][0] else float("inf")
        name = "R+" if r["attack"] == "r_plus" else registry.display(r["attack"])
        print(f"  {name:9} {pct(r['bare']):22} {pct(r['non_adaptive']):22} {pct(r['adaptive']):22} "
              f"{ratio:21.2f}  {'ok' if r['meets'] else 'NO'}")
    for w in result.summary["channels"]["warnings"]:
        print(f"  warning: {w}")
    return {"level": level, "channel": channel, "n_correct": row["n_correct"], "bare_n_correct": row["bare_n_correct"],
            "rows": rows}


def eot_runs(level: str, n: int, defence: str, draws: list[int], out: Path) -> list[dict]:
    rows = []
    print(f"\n(b) zoo {level} behind --defence {defence}, End-PGD adaptive, EOT draws per step:")
    for k in draws:
        t0 = time.perf_counter()
        result = mmaudit.audit(f"zoo:{level}", f"synthetic:{n}", out=out / f"{level}-eot{k}", defence=defence,
                               attacks="end_pgd", eot=k, paper_protocol=True, adaptive_only=True, recovery=0,
                               ocr_limit=0, wrong_ocr="off")
        (m,) = result.summary["channels"]["models"]
        (end,) = m["attacks"]
        recs = result.records("attack")
        passes = sum(r["passes"] for r in recs) / max(1, len(recs))
        rows.append({"level": level, "eot": k, "asr": end["adaptive"], "n_correct": m["n_correct"],
                     "passes": passes, "seconds": time.perf_counter() - t0})
        print(f"  EOT {k:3}: ASR {pct(end['adaptive'])} of |C| {m['n_correct']}, {passes:.0f} passes per question, "
              f"{rows[-1]['seconds']:.0f} s")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="L1,L2,L3")
    ap.add_argument("--n", type=int, default=32, help="questions per task family")
    ap.add_argument("--channel", default="jpeg:75")
    ap.add_argument("--defence", default="noise:16")
    ap.add_argument("--eot", default="1,10", help="EOT draws per step to compare")
    ap.add_argument("--skip-eot", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--out", type=Path, help="keep the run folders here (default: a temporary folder)")
    args = ap.parse_args()
    levels = args.levels.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        got = {"channel": [channel_run(lv, args.n, args.channel, out) for lv in levels]}
        if not args.skip_eot:
            draws = [int(k) for k in args.eot.split(",")]
            got["eot"] = [r for lv in levels for r in eot_runs(lv, args.n, args.defence, draws, out)]
    if args.json:
        args.json.write_text(json.dumps(got, indent=2))


if __name__ == "__main__":
    main()
