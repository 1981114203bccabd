#!/usr/bin/env bash
# Golden tests of `canzona plan` on bundled inputs: the printed summary (minus the planning time)
# must equal the stored one, the plan must be byte-identical across runs, and must agree with the
# stored SHA-256. Regenerate after an intended change with: CZ=build/canzona tests/cli/plan_golden.sh --update
set -u
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
golden="$src/tests/cli/golden"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
update=0
[ "${1:-}" = "--update" ] && update=1
fails=0
total=0

cases=(
  "qwen3-0.6b h100-8-dp8-tp1"
  "qwen3-1.7b h100-64-dp8-tp8"
  "qwen3-8b h100-256-dp64-tp4 --dp anchored --tp none"
  "qwen3-4b h100-64-dp8-tp8 --optimizer soap --unit flops --tp slot"
  "qwen3-32b h100-256-dp32-tp8"
)
for c in "${cases[@]}"; do
  set -- $c
  model=$1 cluster=$2
  shift 2
  name="$model.$cluster$(printf '%s' "$*" | tr -c 'a-z0-9' '_' | sed 's/^_*/./;s/_*$//')"
  total=$((total + 1))
  for i in 1 2; do
    (cd "$src" && "$CZ" plan --model "plans/models/$model.json" \
      --cluster "plans/clusters/$cluster.json" -o "$work/plan$i.json" "$@") \
      | grep -v -e '^planning time' -e '^plan written to' >"$work/summary$i.txt" || true
  done
  sum=$(sha256sum "$work/plan1.json" | cut -d' ' -f1)
  if [ $update -eq 1 ]; then
    cp "$work/summary1.txt" "$golden/$name.txt"
    echo "$sum" >"$golden/$name.sha256"
    echo "updated $name"
    continue
  fi
  ok=1
  if ! (cd "$src" && "$CZ" validate "$work/plan1.json" --model "plans/models/$model.json" \
      --cluster "plans/clusters/$cluster.json" >"$work/validate.txt" 2>&1); then
    echo "FAIL $name: canzona validate rejects the plan"; head -20 "$work/validate.txt"; ok=0
  fi
  cmp -s "$work/plan1.json" "$work/plan2.json" || { echo "FAIL $name: plans differ between runs"; ok=0; }
  if ! diff -u "$golden/$name.txt" "$work/summary1.txt" >"$work/diff"; then
    echo "FAIL $name: summary differs from golden"; head -40 "$work/diff"; ok=0
  fi
  if [ "$sum" != "$(cat "$golden/$name.sha256" 2>/dev/null)" ]; then
    echo "FAIL $name: plan SHA-256 $sum differs from golden"; ok=0
  fi
  [ $ok -eq 1 ] && echo "ok   $name" || fails=$((fails + 1))
done
echo "$((total - fails)) passed, $fails failed"
[ $fails -eq 0 ]
