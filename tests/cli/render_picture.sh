#!/usr/bin/env bash
# canzona render: what a person reading the picture relies on, at 8, 256 and 8,192 GPUs.
# * (a) one bar per GPU while bars stay readable, aggregated columns (max / mean / min) past
#   that, with the busiest GPU named (the argmax of the plan's metrics.tp.gpu_load), marked in
#   its bar or column, and DP-rank ticks that are increasing and never overlap;
# * (a) shares no colour with the panels below it;
# * the timeline's compute boxes carry the name of their largest task;
# * with --cluster: the whole simulated step as phases that add up to the step of
#   'canzona simulate --plan --json', each labelled, and a verdict that names the larger part;
#   without: a note that DP synchronization is not simulated;
# * valid XML, the same bytes on a second run.
set -u
: "${CZ:?CZ must point at the canzona binary}" "${CZ_SOURCE_DIR:?}"
[ -x "$CZ" ] || { echo "skip: $CZ not built"; exit 77; }
command -v xmllint >/dev/null || { echo "skip: xmllint (libxml2-utils) missing"; exit 77; }
command -v python3 >/dev/null || { echo "skip: python3 missing"; exit 77; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
models="$CZ_SOURCE_DIR/plans/models"
clusters="$CZ_SOURCE_DIR/plans/clusters"

cat >"$work/check.py" <<'EOF'
"""check.py SVG PLAN MODE [SIM_JSON]: checks one rendering; MODE is bars or agg. Prints one
FAIL line per broken property and exits 1 when there is any."""
import json
import re
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
svg_path, plan_path, mode = sys.argv[1:4]
sim = json.load(open(sys.argv[4]))["rows"][0] if len(sys.argv) > 4 else None
plan = json.load(open(plan_path))
topo = plan["topology"]
D, R, P = topo["dp"], topo["tp"], topo["pp"]
loads = plan["metrics"]["tp"]["gpu_load"]
root = ET.parse(svg_path).getroot()
bad = []


def text_of(e):
    return "".join(e.itertext())


def by_class(node, cls, tag=None):
    return [e for e in node.iter() if e.get("class") == cls and (tag is None or e.tag == NS + tag)]


def group(gid):
    for e in root.iter(NS + "g"):
        if e.get("id") == gid:
            return e
    return None


# The busiest GPU, named in (a).
busiest = max(range(len(loads)), key=lambda i: (loads[i], -i))
bs, bd, bt = busiest // R // D, busiest // R % D, busiest % R
named = " ".join(text_of(e) for e in by_class(root, "busiest", "text"))
if f"busiest GPU: stage {bs}, DP {bd}, TP {bt} " not in named:
    bad.append(f"busiest GPU not named as stage {bs}, DP {bd}, TP {bt}: {named!r}")
verdict = " ".join(text_of(e) for e in by_class(root, "verdict", "text"))
if not verdict:
    bad.append("no verdict line")

# (a): bars or aggregated columns.
ga = group("loads")
bars, aggs = by_class(ga, "bar", "rect"), by_class(ga, "agg", "g")
if mode == "bars":
    if len(bars) != D * R * P or aggs:
        bad.append(f"expected {D * R * P} bars and no columns, found {len(bars)} and {len(aggs)}")
    marked = [b for b in bars if b.get("fill") == "#08306b"]
    want = f"stage {bs}, DP {bd}, TP {bt}:"
    if len(marked) != 1 or not text_of(marked[0]).startswith(want):
        bad.append(f"busiest bar not the one marked: {[text_of(b) for b in marked]}")
else:
    width = float(root.get("width"))
    if bars or not (10 <= len(aggs) <= (width - 110) / 5 + P):
        bad.append(f"expected 10 .. {(width - 110) / 5:.0f} columns and no bars, found "
                   f"{len(aggs)} columns and {len(bars)} bars")
    covered, marked = 0, []
    for a in aggs:
        m = re.match(r"stage (\d+), DP (\d+)\.\.(\d+) \((\d+) GPUs\): max", text_of(a))
        if not m:
            bad.append(f"column without a readable title: {text_of(a)!r}")
            continue
        s, d0, d1, n = map(int, m.groups())
        covered += n
        fills = [r.get("fill") for r in a.iter(NS + "rect")]
        if "#08306b" in fills:
            marked.append((s, d0, d1))
    if covered != D * R * P:
        bad.append(f"columns cover {covered} GPUs, expected {D * R * P}")
    if len(marked) != 1 or not (marked[0][0] == bs and marked[0][1] <= bd <= marked[0][2]):
        bad.append(f"busiest GPU's column not the one marked: {marked}")

# DP-rank ticks: per stage starting at 0, increasing, never overlapping.
ticks = [(float(e.get("x")), int(text_of(e))) for e in by_class(ga, "xtick", "text")]
if len(ticks) < P * min(D, 5):
    bad.append(f"only {len(ticks)} DP-rank ticks")
if mode == "bars" and D <= 8 and sorted(t[1] for t in ticks) != sorted(list(range(D)) * P):
    bad.append(f"not every DP rank has a tick: {ticks}")
if sum(1 for t in ticks if t[1] == 0) != P:
    bad.append("each stage's ticks must start at DP rank 0")
for (x0, v0), (x1, v1) in zip(ticks, ticks[1:]):
    if v1 == 0:
        continue
    if v1 <= v0:
        bad.append(f"tick {v1} after {v0}")
    if x1 - x0 < (len(str(v0)) + len(str(v1))) * 3 + 4:
        bad.append(f"ticks {v0} and {v1} overlap ({x1 - x0:.1f} px apart)")

# No colour of (a) is used by the panels below it.
def fills(g):
    return {e.get("fill") for e in g.iter(NS + "rect")} if g is not None else set()


shared = fills(ga) & (fills(group("step")) | fills(group("timeline")))
if shared:
    bad.append(f"panel (a) shares colours with the panels below: {sorted(shared)}")

# The timeline: compute boxes, labelled with a task name where wide enough.
gt = group("timeline")
compute = by_class(gt, "compute", "rect")
labels = [text_of(e) for e in by_class(gt, "task-label", "text")]
wide = [c for c in compute if float(c.get("width")) >= 60]
named_boxes = [l for l in labels if not re.fullmatch(r"g\d+", l)]
if not compute or len(labels) < len(wide) or (wide and not named_boxes):
    bad.append(f"{len(compute)} compute boxes ({len(wide)} wide), labels {labels}")

# The simulated step.
gs = group("step")
if sim is None:
    if gs is not None:
        bad.append("a step panel without a cluster")
    if "not simulated (pass --cluster" not in text_of(root):
        bad.append("no note that DP synchronization is not simulated")
else:
    phases = by_class(gs, "phase", "rect") if gs is not None else []
    secs = [float(p.get("data-seconds")) for p in phases]
    want = [v for v in (sim["grad_sync_s"], sim["frag_gather_s"], sim["local_s"],
                        sim["param_sync_s"]) if v > 0]
    if len(secs) != len(want) or any(abs(a - b) > 1e-6 * b for a, b in zip(secs, want)):
        bad.append(f"phases {secs}, expected {want}")
    if abs(sum(secs) - sim["step_s"]) > 1e-6 * sim["step_s"]:
        bad.append(f"phases add up to {sum(secs)}, the step is {sim['step_s']}")
    plabels = " | ".join(text_of(e) for e in by_class(gs, "phase-label", "text"))
    for name in ("gradient", "optimizer update", "parameter all-gather"):
        if name not in plabels:
            bad.append(f"no phase label naming {name!r}: {plabels!r}")
    sync = sim["grad_sync_s"] + sim["frag_gather_s"] + sim["param_sync_s"]
    expect = ("Bound by DP synchronization" if sync >= sim["local_s"]
              else "Bound by the optimizer update")
    if not verdict.startswith(expect):
        bad.append(f"verdict {verdict!r} should start with {expect!r}")

for b in bad:
    print("FAIL:", svg_path.split("/")[-1], b)
sys.exit(1 if bad else 0)
EOF

# check NAME PLAN MODE [CLUSTER] [render options...]: renders, validates, checks, re-renders.
check() {
    local name=$1 plan=$2 mode=$3 cluster=$4
    shift 4
    local copt=() sim=()
    if [ -n "$cluster" ]; then
        copt=(--cluster "$cluster")
        "$CZ" simulate --cluster "$cluster" --plan "$plan" --json >"$work/$name.sim.json" ||
            { fail "$name: simulate --plan failed"; return; }
        sim=("$work/$name.sim.json")
    fi
    "$CZ" render "$plan" -o "$work/$name.svg" "${copt[@]}" "$@" ||
        { fail "$name: render exited non-zero"; return; }
    xmllint --noout "$work/$name.svg" || fail "$name: not valid XML"
    python3 "$work/check.py" "$work/$name.svg" "$plan" "$mode" "${sim[@]}" || fails=$((fails + 1))
    "$CZ" render "$plan" -o "$work/$name.again.svg" "${copt[@]}" "$@" &&
        cmp -s "$work/$name.svg" "$work/$name.again.svg" || fail "$name: not deterministic"
}

# 8 GPUs (DP 8): one bar per GPU, a tick per rank, with and without a cluster, and narrow.
c8="$clusters/h100-8-dp8-tp1.json"
"$CZ" plan --model "$models/qwen3-1.7b.json" --cluster "$c8" -o "$work/p8.json" -q ||
    fail "plan for 8 GPUs"
check g8 "$work/p8.json" bars ""
check g8c "$work/p8.json" bars "$c8"
check g8n "$work/p8.json" bars "$c8" --width 400

# 256 GPUs (DP 32 x TP 8): bars at the default width, columns once a bar would be under 3 px.
c256="$clusters/h100-256-dp32-tp8.json"
"$CZ" plan --model "$models/qwen3-1.7b.json" --cluster "$c256" -o "$work/p256.json" -q ||
    fail "plan for 256 GPUs"
check g256 "$work/p256.json" bars "$c256"
check g256agg "$work/p256.json" agg "$c256" --width 800

# 8,192 GPUs, synthesized from the 256-GPU cluster: DP 1024 x TP 8, and DP 512 x TP 8 x PP 2.
for shape in "1024 8 1" "512 8 2"; do
    set -- $shape
    c="$work/c$1x$2x$3.json"
    sed -e "s/\"dp\": 32,/\"dp\": $1,/" -e "s/\"pp\": 1,/\"pp\": $3,/" \
        -e 's/"gpus": 256,/"gpus": 8192,/' -e 's/"name": "[^"]*"/"name": "big"/' "$c256" >"$c"
    "$CZ" plan --model "$models/qwen3-1.7b.json" --cluster "$c" -o "$work/p$1.json" -q ||
        { fail "plan for 8192 GPUs ($shape)"; continue; }
    check "g8k-$1" "$work/p$1.json" agg ""
    check "g8kc-$1" "$work/p$1.json" agg "$c"
    size=$(wc -c <"$work/g8kc-$1.svg")
    [ "$size" -lt 300000 ] || fail "8192 GPUs ($shape): $size bytes, expected aggregation"
done

# A plan whose loads overflow to infinity (one parameter's cost is 1e308; found by fuzz/
# fuzz_plan) renders without an axis instead of looping for ever on the axis's ticks.
timeout 20 "$CZ" render "$CZ_SOURCE_DIR/tests/data/plan_overflowing_cost.json" \
    -o "$work/overflow.svg" >"$work/overflow.log" 2>&1
rc=$?
[ "$rc" != 124 ] || fail "render of a plan with an infinite load did not finish in 20 s"
[ "$rc" = 0 ] && xmllint --noout "$work/overflow.svg" 2>>"$work/overflow.log" ||
    fail "render of a plan with an infinite load: rc $rc, $(head -c 300 "$work/overflow.log")"

# A DP-4 plan whose dense parameter names the id of an expert bucket (its ranges are per
# expert-DP rank, 2; found by fuzz/fuzz_plan): the simulator read past them. A parameter's bucket
# is now only one of its own buffer, so the plan renders as one whose parameter has no bucket.
timeout 20 "$CZ" render "$CZ_SOURCE_DIR/tests/data/plan_dense_param_in_expert_bucket.json" \
    -o "$work/mixed.svg" >"$work/mixed.log" 2>&1
rc=$?
[ "$rc" = 0 ] && xmllint --noout "$work/mixed.svg" 2>>"$work/mixed.log" ||
    fail "render of a plan with a dense parameter in an expert bucket: rc $rc, $(head -c 300 "$work/mixed.log")"

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "ok"
