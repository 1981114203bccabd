#!/usr/bin/env bash
# canzona plan --split DIR (docs/FORMATS.md section 9) and the start-up model of canzona inspect
# --startup (docs/PERF.md section 16): the folder's files, the whole plan in it the same bytes
# as -o writes, a rank's part far smaller than the plan, the model's figures consistent, and the
# refusals.
set -euo pipefail
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
m=$src/plans/models/test-moe.json
c=$src/plans/clusters/cpu-4-dp4-ep2.json
"$CZ" plan -q -m "$m" -c "$c" --pp-size 2 --split "$tmp/dir"
"$CZ" plan -q -m "$m" -c "$c" --pp-size 2 -o "$tmp/plan.json"
cmp "$tmp/dir/plan.json" "$tmp/plan.json"
for f in header.json stage-0.parts stage-0.index stage-1.parts stage-1.index; do
  [ -s "$tmp/dir/$f" ] || { echo "no $f"; exit 1; }
done
# Per stage: 2 slices (EP 2), 2 DP ranks' schedules, 2 expert ranks' (EP 2 x expert-DP 1).
[ "$(wc -l <"$tmp/dir/stage-0.parts")" -eq 6 ] || { echo "stage-0.parts: expected 6 lines"; exit 1; }
[ "$(stat -c %s "$tmp/dir/stage-0.index")" -eq $((6 * 40)) ] || { echo "index size"; exit 1; }
# With -o FILE the whole plan goes there, the parts into DIR.
"$CZ" plan -q -m "$m" -c "$c" --pp-size 2 -o "$tmp/other.json" --split "$tmp/dir2"
[ ! -e "$tmp/dir2/plan.json" ] && cmp "$tmp/other.json" "$tmp/plan.json"
# inspect of a folder reads its plan.json; --startup gives each form's bytes.
"$CZ" inspect "$tmp/dir" >/dev/null
"$CZ" inspect "$tmp/dir" --startup --json >"$tmp/s.json"
"$CZ" inspect "$tmp/plan.json" --startup | grep -q "give the folder of canzona plan --split"
python3 - "$tmp/s.json" "$tmp/dir" <<'PY'
import json, os, sys
r, d = json.load(open(sys.argv[1])), sys.argv[2]
whole, split = r["whole"], r["split"]
size = os.path.getsize(os.path.join(d, "plan.json"))
assert r["gpus"] == 4 and whole["min_bytes"] == whole["max_bytes"] == size, r
assert whole["total_bytes"] == 4 * size, r
# A rank reads the header, three records and three lines: of stage 0 or 1, EP rank 0 or 1.
hdr = os.path.getsize(os.path.join(d, "header.json"))
lines = {s: [len(l) + 1 for l in open(os.path.join(d, "stage-%d.parts" % s)).read().split("\n")[:-1]]
         for s in (0, 1)}
want = [hdr + 3 * 40 + lines[s][e] + lines[s][2 + dpr] + lines[s][4 + e]
        for s in (0, 1) for dpr in (0, 1) for e in ((dpr * 1) % 2,)]
assert split["max_bytes"] == max(want) and split["min_bytes"] == min(want), (split, want)
assert split["total_bytes"] == sum(want), (split, want)
assert split["max_bytes"] < whole["min_bytes"] / 2, r
m = r["model"]
assert abs(split["max_rank_s"] - (m["fixed_s"] + split["max_bytes"] / (m["parse_mb_s"] * 1e6)
                                  + split["max_bytes"] / (m["read_gbps"] * 1e9))) < 1e-6, r
PY
# Refusals: a bandwidth that is not one, --split with the plan on standard output.
rc=0; "$CZ" inspect "$tmp/plan.json" --startup --read-gbps 0 2>"$tmp/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q "read-gbps: expected a bandwidth" "$tmp/err"
rc=0; "$CZ" plan -q -m "$m" -c "$c" -o - --split "$tmp/dir3" >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" -eq 2 ] && grep -q -- "--split needs the plan in a file" "$tmp/err"
echo "split plan: OK"
