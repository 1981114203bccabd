#!/usr/bin/env bash
# The analysis functions of canzona.h give what the CLI gives: the analysis program (analysis.c,
# public header only, linked with libcanzona.so) writes its import, plan, validate, inspect,
# diff and render results, and each must equal the output of the matching canzona command.
# Usage: analysis.sh <canzona CLI> <analysis program> <source dir>
set -euo pipefail
cz=$1 prog=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
config=$src/tests/data/hf/mixtral-tiny.config.json
cluster=$src/plans/clusters/cpu-4-dp2-tp2.json
mkdir "$tmp/lib"
"$prog" "$config" "$cluster" "$src/tests/data/model_tiny.json" "$tmp/lib"

same() { # <what> <library's file> <CLI's file>
  cmp -s "$2" "$3" || { echo "FAIL: $1 differs between the library and the CLI"; diff "$2" "$3" | head -20; exit 1; }
}
"$cz" import-hf "$config" --tp-size 2 -o "$tmp/model.json"
same import-hf "$tmp/lib/model.json" "$tmp/model.json"
"$cz" validate --json "$tmp/lib/plan.json" -m "$tmp/model.json" -c "$cluster" > "$tmp/validate.json"
same validate "$tmp/lib/validate.json" "$tmp/validate.json"
"$cz" inspect --json --cluster "$cluster" "$tmp/lib/plan.json" > "$tmp/inspect.json"
same inspect "$tmp/lib/inspect.json" "$tmp/inspect.json"
"$cz" diff --json "$tmp/lib/plan.json" "$tmp/lib/plan2.json" > "$tmp/diff.json"
same diff "$tmp/lib/diff.json" "$tmp/diff.json"
"$cz" render "$tmp/lib/plan.json" -c "$cluster" -o "$tmp/render.svg"
same render "$tmp/lib/render.svg" "$tmp/render.svg"
echo "ok: import-hf, validate, inspect, diff and render agree between canzona.h and the CLI"
