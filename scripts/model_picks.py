#!/usr/bin/env python3
"""How well the static GPU model picks, and where it is biased, over check-model's predictions of measured kernels
(docs/autotune.md, "Long rows in the row-split walk" and "The row-split register bound against ptxas").

    sparsert check-model --data ../shared/data -q -o DIR/NAME-model.json MEASURED.json   # for each measured file
    python3 scripts/model_picks.py DIR [WORST]

Reads every *-model.json in DIR. A pick is the model's fastest among the kernels of one layer at one width in one
group of a file (a bench file's kept kernels, its runs timed alone, its kernels not kept; a tuning report's layer)
that were timed, the timed-only ones (prefetching loop `pf`, register budget `reg<=`) left out as the model never
picks them; its measured time over the fastest measured one is the regret. Prints the geometric mean and worst
regret among row-split kernels only and among all kernels, the kernels outside 2x, and the mean and spread of the
log error (log measured / predicted: above 0, the model is fast) by kind and, for the plain row-split kernel, by
floats a lane. With WORST, also the WORST largest regrets among all kernels.
"""
import collections, glob, json, math, re, sys


def kind_of(label):
    if label.startswith("baked"):
        return "baked"
    if " staged-rows " in label:
        return "staged rows"
    if " rows " in label:
        return "rows"
    return "ell"


def timed_only(label):
    return " pf" in label or "reg<=" in label


def regret(groups):
    ratios, worst = [], []
    for key, points in groups.items():
        if len({p["label"] for p in points}) < 2:
            continue
        best = min(points, key=lambda p: p["measured_us"])
        pick = min(points, key=lambda p: p["predicted_us"])
        ratios.append(pick["measured_us"] / best["measured_us"])
        worst.append((ratios[-1], key, pick, best))
    if not ratios:
        return 0, 1.0, 1.0, []
    return len(ratios), math.exp(sum(map(math.log, ratios)) / len(ratios)), max(ratios), worst


def spread(errors):
    mean = sum(errors) / len(errors)
    return mean, math.sqrt(sum((e - mean) ** 2 for e in errors) / len(errors))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    files = sorted(glob.glob(f"{sys.argv[1]}/*-model.json"))
    if not files:
        sys.exit(f"model_picks.py: no *-model.json in {sys.argv[1]}")
    row_split, every = collections.defaultdict(list), collections.defaultdict(list)
    errors = collections.defaultdict(list)
    kernels = outside = 0
    for f in files:
        for gi, group in enumerate(json.load(open(f))):
            for p in group["points"]:
                if p["measured_us"] <= 0 or p["predicted_us"] <= 0:
                    continue
                kernels += 1
                e = math.log(p["measured_us"] / p["predicted_us"])
                outside += abs(e) > math.log(2)
                kind = kind_of(p["label"])
                errors[kind].append(e)
                if kind == "rows" and not timed_only(p["label"]):
                    lanes = re.search(r" cpt=(\d+)", p["label"])
                    errors[f"rows, {lanes.group(1) if lanes else '?'} floats a lane"].append(e)
                if timed_only(p["label"]):
                    continue
                key = (f, gi, p["layer"], p.get("family", ""), p["n"])
                every[key].append(p)
                if kind in ("rows", "staged rows"):
                    row_split[key].append(p)
    print(f"{len(files)} files, {kernels} kernels, {outside} outside 2x")
    for kind in sorted(errors):
        mean, sd = spread(errors[kind])
        print(f"  {kind}: {len(errors[kind])} kernels, log error mean {mean:+.3f}, sd {sd:.3f}")
    for name, groups in (("row-split kernels", row_split), ("all kernels", every)):
        n, geo, worst, _ = regret(groups)
        print(f"pick among {name}: {geo:.3f}x the fastest over {n} layer runs, worst {worst:.2f}x")
    if len(sys.argv) > 2:
        _, _, _, worst = regret(every)
        for r, key, pick, best in sorted(worst, key=lambda w: w[0])[-int(sys.argv[2]):]:
            family = f" ({key[3]})" if key[3] else ""
            print(f"{r:.2f}x {key[0].split('/')[-1]} {key[2]}{family} N={key[4]}: picks {pick['label']} "
                  f"({pick['measured_us']:.2f} us, modelled {pick['predicted_us']:.2f}); fastest {best['label']} "
                  f"({best['measured_us']:.2f} us, modelled {best['predicted_us']:.2f})")


if __name__ == "__main__":
    main()
