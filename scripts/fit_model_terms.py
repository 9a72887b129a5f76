#!/usr/bin/env python3
"""Fits the static GPU model's term scales to measured kernels (docs/autotune.md, "Calibration").

    sparsert check-model --data ../shared/data -q -o DIR/NAME-model.json MEASURED.json   # for each measured file
    python3 scripts/fit_model_terms.py DIR [HOST_US] [--contention active|distinct] [--fix NAME...]

Reads every *-model.json in DIR (check-model's predictions with each estimate's terms beside the measured time) and
finds, by coordinate descent on the squared log ratio, the scales of: the fetch term per sharing class (one warp, two
warps of a group, three or more; two or more column tiles, and with immediates 16-31 or 32 or more warps of the grid
running each region), the issue and critical terms, the row-split kernel's latency and memory terms (the ELL walk's
and a baked kernel's DRAM term keep theirs), and the launch cost of a run back to back. A run timed alone adds
HOST_US (default 1.6, the host's share that RealGpu.LaunchCostsForTheModel measured); back to back a run takes at
least 2.28 us. --fix keeps the named scales at 1 (the model's value). Only kernels whose prediction the terms rebuild
(no stream chain) take part; a kernel of several entries keeps the model's price of its further entries (1.6 us each
side by side), which on large layers is more than they cost (one entry against eight on rn50's N = 49 tiles: 10.5
against 14.9 us, about 0.6 us an entry), so the fetch scales of such files lean low. Prints the scales and, per file,
the worst ratio and the Spearman of the ranking before and after, and the pick before and after: over each group of a
layer's timed kernels (a file's group, layer and width; the timed-only `pf` and `reg<=` twins left out), the
measured time of the kernel the scales rank fastest over the fastest measured (geometric mean and worst).
--contention adds a fetch term the model does not have, with its own scale `contention`, for trying it again
(docs/autotune.md, "Instruction fetch under contention, refitted"): `active` multiplies a baked kernel's fetch term
by 1 + (SMs running blocks) / contention, a per-SM rate that falls as more SMs fetch at once; `distinct` bounds it
below by the distinct code of the launch (each row block's code once, whatever its column tiles) at contention GB/s. A scale multiplies the term as the model computes
it; to apply a fit, divide the class's fetch gain by its f_ scale, multiply kBakedDependentCpi (and for the
streamed kernels kDependentCpi) by `critical`, and scale the issue, latency and memory terms and the back-to-back launch (kGpuLaunchUs) in autotune/src/model.cpp, then rerun
the ModelCheck and Model tests (docs/autotune.md, "The fit of 2026-11-26" says what that broke the first time).
"""
import collections, glob, json, math, os, re, sys

FLOOR_US = 2.28
# The model's own launch terms (autotune/src/model.cpp): kGpuLaunchUs a launch back to back, kHostSubmitUs once for a
# run timed alone. check-model's output carries them; what a kernel's launch term holds beyond them is its further
# entries.
MODEL_LAUNCH_US = 2.25
MODEL_HOST_US = 1.6


def layer_key(p):
    """A point's layer: a bench problem's name with its family where check-model gives one (the transformer suite has
    two problems of each name, at 90% and 95%)."""
    return p["layer"] + (" (" + p["family"] + ")" if p.get("family") else "")


def points(directory):
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*-model.json"))):
        groups = json.load(open(path))
        if not isinstance(groups, list):
            continue
        name = os.path.basename(path)[: -len("-model.json")]
        for g in groups:
            # Timed alone: check-model's second group of a bench file ("runs timed alone"; the first is then back to
            # back), or a file that predates back-to-back timing, which check-model models with a lone run's launch
            # (MODEL_LAUNCH_US + MODEL_HOST_US) and no kernel at MODEL_LAUNCH_US. The launch alone does not tell a
            # group of the two apart: a kernel of two entries back to back has it too (1.6 us an entry). A group
            # with neither launch (every kernel of several entries) is left out.
            launches = [p["estimate"]["launch_us"] for p in g["points"]]
            alone_us = MODEL_LAUNCH_US + MODEL_HOST_US
            back_to_back = any(abs(x - MODEL_LAUNCH_US) < 0.01 for x in launches)
            if "alone" in g.get("source", ""):
                alone = True
            elif any("alone" in other.get("source", "") for other in groups):
                alone = False
            else:
                alone = not back_to_back and any(abs(x - alone_us) < 0.01 for x in launches)
            if not alone and not back_to_back and not any("alone" in o.get("source", "") for o in groups):
                continue
            for p in g["points"]:
                d = dict(file=name, group=id(g), layer=layer_key(p), alone=alone, label=p["label"], n=p["n"],
                         meas=p["measured_us"], pred=p["predicted_us"], e=p["estimate"], tiles=1)
                m = re.match(r"baked mb=(\d+) gy=(\d+) nt=(\d+) cpt=(\d+) (imm|const)", p["label"])
                if m:
                    nt, cpt = int(m.group(3)), int(m.group(4))
                    tiles = math.ceil(max(p["n"], 1) / nt)
                    d["tiles"] = tiles
                    warps_x = (nt // cpt + 31) // 32
                    imm, region_warps = m.group(5) == "imm", tiles * warps_x
                    d["cls"] = ("many" if tiles >= 2 and imm and region_warps >= 32 else
                                "several" if tiles >= 2 and imm and region_warps >= 16 else "pair" if tiles >= 2 else
                                "wide" if warps_x >= 3 else "warp2" if warps_x == 2 else "solo")
                else:
                    # The row-split kernel's terms (rows) are the model's own; the ELL walk's (ell) carry the time
                    # scale fitted to it on the Graph Challenge, which this fit leaves alone.
                    d["cls"] = "rows" if p["label"].startswith("streamed rows") else "ell"
                e = d["e"]
                # What the launch term holds beyond one launch's own cost: further entries side by side.
                d["entries_us"] = e["launch_us"] - (alone_us if alone else MODEL_LAUNCH_US)
                terms = max(e["fetch_us"], e["throughput_us"], e["critical_us"], e["latency_us"] + e["shared_us"],
                            e["memory_us"])
                rebuilt = terms + e["launch_us"] if alone else max(terms + e["launch_us"], FLOOR_US)
                # Only kernels whose prediction the terms rebuild (not those a stream's chain of entries bounds).
                if e["bound"] != "stream order" and abs(rebuilt - d["pred"]) <= 0.02 * d["pred"]:
                    out.append(d)
    return out


SMS = 132  # the H100's and the H200's


def predict(p, th, host, contention=None):
    e = p["e"]
    fetch = e["fetch_us"] * th["f_" + p["cls"]] if p["cls"] not in ("rows", "ell") else 0.0
    if fetch and contention == "active":
        fetch *= 1 + min(e["grid_blocks"], SMS) / th["contention"]
    elif fetch and contention == "distinct":
        fetch = max(fetch, e["grid_blocks"] / p["tiles"] * e["code_bytes_per_block"] / (th["contention"] * 1e3))
    rows = p["cls"] == "rows"
    t = max(fetch, e["throughput_us"] * th["issue"], e["critical_us"] * th["critical"],
            (e["latency_us"] + e["shared_us"]) * (th["latency"] if rows else 1.0),
            e["memory_us"] * (th["memory"] if rows else 1.0))
    launch = th["launch"] + p["entries_us"]
    return t + launch + host if p["alone"] else max(t + launch, FLOOR_US)


def spearman(x, y):
    def ranks(v):
        r = [0] * len(v)
        for i, j in enumerate(sorted(range(len(v)), key=lambda i: v[i])):
            r[j] = i
        return r
    n = len(x)
    if n < 3:
        return float("nan")
    a, b = ranks(x), ranks(y)
    return 1 - 6 * sum((i - j) ** 2 for i, j in zip(a, b)) / (n * (n * n - 1))


def pick_regret(pts, th, host, contention):
    groups = collections.defaultdict(list)
    for p in pts:
        if " pf" not in p["label"] and "reg<=" not in p["label"]:
            groups[(p["group"], p["layer"], p["n"])].append(p)
    ratios = []
    for v in groups.values():
        if len({p["label"] for p in v}) >= 2:
            pick = min(v, key=lambda p: predict(p, th, host, contention))
            ratios.append(pick["meas"] / min(p["meas"] for p in v))
    return math.exp(sum(map(math.log, ratios)) / len(ratios)), max(ratios), len(ratios)


def main():
    args = sys.argv[1:]
    fixed = set()
    if "--fix" in args:
        fixed |= set(args[args.index("--fix") + 1:])
        args = args[: args.index("--fix")]
    contention = None
    if "--contention" in args:
        i = args.index("--contention")
        contention = args[i + 1]
        if contention not in ("active", "distinct"):
            sys.exit("--contention: active or distinct")
        args = args[:i] + args[i + 2:]
    else:
        fixed.add("f_solo")  # without a contention term f_solo is the fetch rate itself: the classes scale against it
    directory = args[0]
    host = float(args[1]) if len(args) > 1 else 1.6
    pts = points(directory)
    model = dict(f_solo=1.0, f_warp2=1.0, f_wide=1.0, f_pair=1.0, f_several=1.0, f_many=1.0, issue=1.0, critical=1.0,
                 latency=1.0, memory=1.0, launch=MODEL_LAUNCH_US)
    th = dict(model)
    if contention:
        th["contention"] = 100.0 if contention == "active" else 1000.0
    loss = lambda t, c=contention: sum(math.log(predict(p, t, host, c) / p["meas"]) ** 2 for p in pts)
    step = 0.5
    while step > 0.005:
        improved = False
        for k in th:
            if k in fixed:
                continue
            for mult in (1 + step, 1 / (1 + step)):
                t2 = dict(th, **{k: th[k] * mult})
                if loss(t2) < loss(th) - 1e-9:
                    th, improved = t2, True
        if not improved:
            step /= 2
    print(f"{len(pts)} kernels; loss {loss(model, None):.2f} with the model's terms, {loss(th):.2f} fitted")
    print({k: round(v, 3) for k, v in th.items()})
    for name, t, c in (("the model's", model, None), ("fitted", th, contention)):
        mean, worst, count = pick_regret(pts, t, host, c)
        print(f"pick ({name} terms): {mean:.4f}x the fastest measured over {count} layer runs, worst {worst:.2f}x")
    groups = collections.defaultdict(list)
    for p in pts:
        groups[(p["file"], p["alone"])].append(p)
    for (name, alone), v in sorted(groups.items()):
        before = max(max(p["meas"] / p["pred"], p["pred"] / p["meas"]) for p in v)
        fit = [predict(p, th, host, contention) for p in v]
        after = max(max(p["meas"] / f, f / p["meas"]) for p, f in zip(v, fit))
        s0 = spearman([p["pred"] for p in v], [p["meas"] for p in v])
        s1 = spearman(fit, [p["meas"] for p in v])
        print(f"{name:40s} {'alone' if alone else 'b2b  '} {len(v):3d} kernels  worst {before:.2f} -> {after:.2f}"
              f"  Spearman {s0:.2f} -> {s1:.2f}")


if __name__ == "__main__":
    main()
