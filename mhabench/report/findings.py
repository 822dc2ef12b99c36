"""The findings section: one line per question and machine, computed from the tables the
other sections built (so each number here is the one its evidence shows), each linking to
the section that holds that evidence. It is built last and shown first."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable

import pandas as pd

from mhabench.analysis.comparisons.releases import finding as releases_finding
from mhabench.analysis.comparisons.versions import finding
from mhabench.analysis.history.regressions import CONFIRMED_VERDICTS
from mhabench.analysis.prediction.validation_samples import newest, pooled_tail, tail_line
from mhabench.core.backends import BUILTIN
from mhabench.core.cost import TRAIN_FACTOR
from mhabench.report.context import CONFIG_KEY, Context
from mhabench.report.render.palette import FRAMEWORK_NAMES
from mhabench.report.sections import models as sections_models
from mhabench.report.sections.changes import releases as sections_releases
from mhabench.report.sections.compare import best_backends
from mhabench.report.types import Finding, Section

Answer = Callable[[Context, dict[str, Section], str], str | None]
NOT_MEASURED = "not measured"
# A plug-in's cells against at most this many built-in backends of its framework, the
# framework's fused call first (the baseline mhabench init picks).
BASELINES_SHOWN = 3


def _table(sections: dict[str, Section], sid: str, name: str, machine: str,
           measured: str | None = None) -> pd.DataFrame:
    """One machine's rows of a section's table (empty when the section has none), only
    those with a value in column ``measured`` if given."""
    section = sections.get(sid)
    for table in section.tables if section else ():
        if table.name == name and "machine" in table.frame.columns:
            rows = table.frame[table.frame["machine"] == machine]
            return rows.dropna(subset=[measured]) if measured else rows
    return pd.DataFrame()


def _fw(name: str) -> str:
    return FRAMEWORK_NAMES.get(name, name)


def _float32_first(frame: pd.DataFrame) -> pd.DataFrame:
    """The float32 rows where there are any (the chapter's dtype), else the first dtype."""
    if frame.empty or "dtype" not in frame.columns:
        return frame
    dtype = "float32" if (frame["dtype"] == "float32").any() else sorted(frame["dtype"])[0]
    return frame[frame["dtype"] == dtype]


def exercise(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    ex = _float32_first(_table(sections, "exercise-6-4", "summary", machine))
    if ex.empty:
        return None
    first = ex.iloc[0]
    ex = ex[(ex["shape"] == first["shape"]) & (ex["device"] == first["device"])]
    largest = first["h range"].split("-")[-1]
    batched = ex[ex["backend"] == "batched"]
    top = ex.loc[ex["at largest h (ms)"].idxmin()]
    parts = [f"{first['shape']} {first['dtype']}, h {first['h range']}: "]
    if len(batched):
        parts.append("batched (the chapter's layout) slowest/fastest " + ", ".join(
            f"{r['slowest/fastest']:.1f}x ({_fw(r['framework'])})"
            for r in batched.to_dict("records")) + "; ")
    parts.append(f"fastest at h={largest}: {top['framework']}/{top['backend']} "
                 f"{top['at largest h (ms)']:.3g} ms ({top['slowest/fastest']:.1f}x over h). "
                 "Grows with h: the b*h*n*m scores, not the FLOPs")
    dec = _table(sections, "per-head-decomposition", "summary", machine)
    dec = dec[(dec["backend"] == "batched") & (dec["dtype"] == first["dtype"])
              & (dec["shape"] == first["shape"])] if len(dec) else dec
    if len(dec):
        parts.append("; time model R^2 on batched " + ", ".join(
            f"{r['R^2 on sweep']:.2f} ({_fw(r['framework'])}"
            + (f", b*h*n*m term {r['share b*h*n*m (%)']:.0f}% of the trend)" if r["good fit"]
               else ", poor fit)") for r in dec.to_dict("records")))
    return "".join(parts) + "."


def fastest(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    best = best_backends(ctx)
    best = _float32_first(best[best["machine"] == machine]) if len(best) else best
    if best.empty:
        return None
    top = best[best["rank in framework"] == 1].sort_values("geometric mean (ms)")
    text = "; ".join(f"{_fw(r['framework'])}: {r['backend']} {r['geometric mean (ms)']:.3g} ms"
                     for r in top.to_dict("records"))
    text += f" (geometric mean over h {top['h'].iloc[0]}, {top['shape'].iloc[0]})"
    if len(top) > 1:
        lead, other = top.iloc[0], top.iloc[1]
        text += (f"; {_fw(other['framework'])}'s best takes "
                 f"{other['geometric mean (ms)'] / lead['geometric mean (ms)']:.2f}x "
                 f"{_fw(lead['framework'])}'s")
    return text + "."


def cross(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    t = _table(sections, "self-vs-cross", "cross", machine, "cross/self time")
    if t.empty:
        return None
    return (f"cross-attention (n queries over m keys) takes {t['cross/self time'].median():.2f}x "
            f"the time of self-attention over n (median of {len(t)} pairs; FLOP model "
            f"{t['cross/self FLOPs'].median():.2f}x).")


def variants(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    t = _table(sections, "mha-gqa-mqa", "variants", machine)
    t = t[t["variant"] != "mha"] if len(t) else t
    if t.empty:
        return None
    parts = []
    for variant, g in t.groupby("variant"):
        kv = g["KV cache / MHA"].median()
        parts.append(f"{variant.upper()} {g['time / MHA'].median():.2f}x MHA's time with "
                     f"1/{1 / kv:.0f} of its KV cache")
    return "; ".join(parts) + f" (medians of {len(t)} cells)."


def decoding(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    parts = []
    kv = _table(sections, "decoding", "kv-cache", machine, "prefix/decode time")
    if len(kv):
        parts.append(f"recomputing the prefix takes {kv['prefix/decode time'].median():.1f}x "
                     "the time of a decode step over the KV cache")
    dec = _table(sections, "decoding", "decode", machine, "recomputed/cached time")
    if len(dec):
        parts.append("recomputing the source keys/values (7.2) takes "
                     f"{dec['recomputed/cached time'].median():.1f}x a cached decoder step's "
                     f"time (model FLOPs {dec['model FLOP ratio'].median():.1f}x)")
    return "; ".join(parts) + " (medians)." if parts else None


def training(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    t = _table(sections, "forward-backward", "train", machine)
    if t.empty:
        return None
    return (f"forward + backward takes {t['ratio'].median():.1f}x the forward pass (median of "
            f"{len(t)}, {t['ratio'].min():.1f}-{t['ratio'].max():.1f}; the FLOP model counts "
            f"{TRAIN_FACTOR}x).")


def accuracy(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    errors = sections["time-model"].facts.get("leave_out") if "time-model" in sections else None
    mine = errors[errors["machine"] == machine] if errors is not None else pd.DataFrame()
    parts = []
    if len(mine):
        parts.append(f"leave-out median error {100 * mine['rel_error'].median():.0f}% "
                     f"(worst {100 * mine['rel_error'].max():.0f}%, {len(mine)} cells; the "
                     f"FLOP model at one rate {100 * mine['flop_rate_rel_error'].median():.0f}%)")
        steady = sections["time-model"].facts.get("steadiness")
        bursty = steady[steady["machine"].eq(machine) & steady["bursty"]] if (
            steady is not None) else ()
        if len(bursty):
            parts.append("the grid was timed in bursts (probe slowdown 90th percentile "
                         f"x{bursty['90th percentile'].iloc[0]:.2f}): re-time it quiet")
    mine = [d for d in ctx.validations if d.get("machine") in (machine, None) and d["rows"]]
    if mine:
        data = newest(mine)
        part = data["summary"]["all"]
        parts.append(f"random configs off the grid: median {100 * part['median_rel_error']:.0f}%"
                     f" ({part['cells']} configs, seed {data.get('seed')})")
        if len(mine) > 1 and len(tail := pooled_tail(mine)):
            parts.append(tail_line(tail))
    elif parts:
        parts.append("random off-grid sample not given (mhabench validate --save, then "
                     "--validation)")
    return "; ".join(parts) + "." if parts else None


def regressions(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    commits = ctx.results.frame.loc[ctx.results.frame["machine"] == machine, "commit"].unique()
    if len(commits) < 2:
        return f"one commit measured ({commits[0][:8] if len(commits) else 'none'}): nothing " \
               "to compare yet."
    facts = sections["regressions"].facts
    if "order" not in facts:
        return (f"{len(commits)} commits measured, no cell at two of them: nothing to "
                "compare.")
    order = facts["order"].commits
    mine = [c for c in order if c in set(commits)]
    newest, previous = mine[-1], mine[-2]
    shifts = [s for s in facts["verdicts"].listed() if s.history.machine == machine
             and s.commit == newest and s.verdict in (*CONFIRMED_VERDICTS, "candidate")]
    changes = _table(sections, "regressions", "kernel-changes", machine)
    changes = changes[changes["commit"] == newest[:8]] if len(changes) else changes
    text = (f"{newest[:8]} against {previous[:8]}: " + (
        f"{len(shifts)} cell(s) slower by {ctx.threshold:g}x or more ("
        + ", ".join(f"{s.history.group or s.history.benchmark} {s.ratio:.2f}x {s.verdict}"
                    for s in shifts[:3]) + ("; ..." if len(shifts) > 3 else "") + ")"
        if shifts else f"no cell slower by {ctx.threshold:g}x or more"))
    if len(changes):
        text += f"; {len(changes)} kernel change(s), e.g. {changes['kernel'].iloc[0]}"
    return text + "."


def _shifts_text(sections: dict[str, Section], machine: str, group: str) -> str:
    """The shifts of one framework/backend's cells that stand or are candidates, by commit:
    "1.50x at 1a2b3c4d (9 cells: 8 holds, 1 candidate)", or that there is none."""
    facts = sections["regressions"].facts if "regressions" in sections else {}
    if "verdicts" not in facts:
        return "one commit measured, no history yet"
    at: dict[str, list] = {}
    for s in facts["verdicts"].listed():
        if (s.history.machine == machine and s.history.group == group
                and s.verdict in (*CONFIRMED_VERDICTS, "candidate")):
            at.setdefault(s.commit, []).append(s)
    if not at:
        return f"no shift over {len(facts['order'].commits)} commits"
    order = facts["order"].commits
    return "; ".join(
        f"{statistics.median(s.ratio for s in shifts):.2f}x at {commit[:8]} ({len(shifts)} "
        f"cells: " + ", ".join(f"{n} {v}" for v, n in Counter(
            s.verdict for s in shifts).most_common()) + ")"
        for commit, shifts in sorted(at.items(), key=lambda kv: order.index(kv[0])
                                    if kv[0] in order else len(order)))


def own_backends(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    """Each plug-in backend (a registered backend that is no built-in) against the built-in
    backends timed at the same cells, and its shifts across commits and theirs."""
    t = ctx.timings
    t = t[t["machine"] == machine] if len(t) else t
    mine = sorted({(fw, b) for fw, b in zip(t["framework"], t["backend"], strict=True)
                   if b not in BUILTIN}) if len(t) else []
    key = [c for c in CONFIG_KEY if c not in ("machine", "backend")]
    parts = []
    for fw, backend in mine:
        own = t[(t["framework"] == fw) & (t["backend"] == backend)]
        others = sorted({b for b in t.loc[t["framework"] == fw, "backend"] if b in BUILTIN},
                        key=lambda b: (b != "fused", BUILTIN.index(b)))
        against = []
        for base in others:
            pairs = own.merge(t[(t["framework"] == fw) & (t["backend"] == base)], on=key,
                              suffixes=("", "_base"))
            if len(against) == BASELINES_SHOWN or pairs.empty:
                continue
            ratios = (pairs["value"] / pairs["value_base"]).tolist()
            mean = math.exp(statistics.fmean(math.log(r) for r in ratios))
            against.append((base, f"{_fw(fw)} {base}: {mean:.2f}x its time ({len(ratios)} "
                                  f"cells, {min(ratios):.2f}-{max(ratios):.2f}x)"))
        newest = sorted(set(own["commit"])) if "commit" in own.columns else []
        text = f"{backend} ({_fw(fw)})" + (f" at {newest[0][:8]}" if len(newest) == 1 else "")
        text += (" against " + "; ".join(a for _, a in against) if against
                 else ": no built-in backend timed at its cells")
        text += f". Regressions: {_shifts_text(sections, machine, f'{fw}/{backend}')}"
        for base, _ in against:
            text += (f"; baseline {_fw(fw)} {base}: "
                     f"{_shifts_text(sections, machine, f'{fw}/{base}')}")
        parts.append(text + ".")
    return " ".join(parts) or None


def versions(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    summary = sections["versions"].facts.get("summary")
    return None if summary is None else finding(summary)


def releases(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    section = sections.get(sections_releases.SECTION_ID)
    summary = section.facts.get("summary") if section else None
    return None if summary is None else releases_finding(summary)


def fallbacks(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    k = ctx.kernels
    if k is None or k.empty:
        return None
    fused = k[(k["machine"] == machine) & (k["backend"] == "fused")]
    if fused.empty:
        return None
    fell = fused[fused["note"].str.startswith("fallback")]
    if fell.empty:
        return f"none of {len(fused)} fused cells fell back to the math kernel."
    return (f"{len(fell)} of {len(fused)} fused cells fell back to math and write the map "
            f"(e.g. {fell['config_id'].iloc[0]}).")


def gpu_peak(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    prefill = _table(sections, "gpu-peak", "gpu-prefill", machine, "TFLOP/s")
    decode = _table(sections, "gpu-peak", "gpu-decode", machine, "TB/s")
    parts = []
    if len(prefill):
        mha = prefill[(prefill["mode"] == "forward") & ~prefill["causal"].astype(bool)
                      & (prefill["heads"] == prefill["kv_heads"])]
        mha = mha if len(mha) else prefill
        top = mha[mha["n"] == mha["n"].max()]
        best = top.loc[top["TFLOP/s"].idxmax()]
        parts.append(f"forward {best['dtype']} at n = {best['n']}: best "
                     f"{best['framework']}/{best['backend']} {best['TFLOP/s']:.0f} TFLOP/s "
                     f"({best['% calibrated']:.0f} % of calibrated, {best['% spec']:.0f} % of "
                     "spec)")
    if len(decode):
        best = decode.loc[decode["TB/s"].idxmax()]
        parts.append(f"decode: best {best['framework']}/{best['backend']} "
                     f"{best['TB/s']:.2f} TB/s at batch {best['batch']}, KV {best['m']} "
                     f"({best['% spec']:.0f} % of spec HBM)")
    throttled = sum(table["GPU state"].str.contains("THROTTLED").sum()
                    for table in (prefill, decode) if len(table))
    if parts and throttled:
        parts.append(f"{throttled} cells ran throttled")
    return "; ".join(parts) + "." if parts else None


def missing(ctx: Context, sections: dict[str, Section], machine: str) -> str | None:
    frame = ctx.results.frame
    commits = frame.loc[frame["machine"] == machine, ["commit", "date"]]
    if commits.empty:
        return None
    newest = commits.sort_values("date")["commit"].iloc[-1]
    lost = [m for m in ctx.results.missing if m[0] == machine and m[1] == newest
            and ".time_" in m[2]]
    skipped = sum(m[4] == "skipped" for m in lost)
    failed = len(lost) - skipped
    timed = ((frame["machine"] == machine) & (frame["commit"] == newest)
             & (frame["kind"] == "time")).sum()
    return (f"{timed} time cells measured at {newest[:8]}; {skipped} skipped (not in this grid, "
            f"not supported, or over the memory budget), {failed} failed.")


# (question, section with its evidence, answer)
QUESTIONS: tuple[tuple[str, str, Answer], ...] = (
    ("Exercise 6.4: is h free at fixed d?", "exercise-6-4", exercise),
    ("Fastest backend per framework", "torch-vs-jax", fastest),
    ("Self- vs cross-attention (Ex. 7)", "self-vs-cross", cross),
    ("GQA and MQA (Ex. 8)", "mha-gqa-mqa", variants),
    ("Decoding with and without a cache (Ex. 7.2, 8)", "decoding", decoding),
    ("Forward vs forward + backward", "forward-backward", training),
    ("Published models: prefill, decode and its bound", sections_models.SECTION_ID,
     sections_models.finding),
    ("Time model accuracy", "time-model", accuracy),
    ("Regressions since the previous commit", "regressions", regressions),
    ("Your backends against the baselines", "regressions", own_backends),
    ("Did the other dependency set slow a cell?", "versions", versions),
    ("Which release changed a cell?", sections_releases.SECTION_ID, releases),
    ("GPU kernels against the peak (16k tokens, width 128)", "gpu-peak", gpu_peak),
    ("Kernel fallbacks", "kernels", fallbacks),
    ("Cells skipped or failed", "warnings", missing),
)


# Questions only some runs ask (a versions comparison, a release sweep, plug-in backends):
# left out where nothing answers them.
ONLY_WHEN_MEASURED = frozenset({versions, releases, own_backends})


def machine_label(ctx: Context, machine: str) -> str:
    info = ctx.results.machines.get(machine, {})
    gpu = info.get("facts", {}).get("gpu")
    cores = info.get("num_cpu")
    return f"{machine} ({gpu or 'CPU'}" + (f", {cores} cores)" if cores and not gpu else ")")


def findings_section(ctx: Context, sections: dict[str, Section]) -> Section:
    """One finding per question; one answer per machine that has timings."""
    machines = [m for m in ctx.results.machine_names
                if not ctx.timings.empty and (ctx.timings["machine"] == m).any()]
    if not machines:
        return Section("", "", absent="No timed attention cells: nothing to report.")
    # CPU machines first, then GPU ones beside them
    machines.sort(key=lambda m: (bool(ctx.results.machines.get(m, {}).get("facts", {})
                                      .get("gpu")), m))
    out = []
    for question, target, answer in QUESTIONS:
        answers = {}
        for machine in machines:
            answers[machine_label(ctx, machine)] = answer(ctx, sections, machine) or NOT_MEASURED
        if answer in ONLY_WHEN_MEASURED and set(answers.values()) == {NOT_MEASURED}:
            continue
        out.append(Finding(question, target, answers))
    return Section("", "", findings=out)
