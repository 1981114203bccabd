#!/usr/bin/env bash
# The bash completion (planner/cli/canzona.bash), sourced under bash: it offers every subcommand
# 'canzona --help' lists, for each subcommand exactly the options its --help lists, the names
# an option takes, and file names for file options and positional arguments.
set -uo pipefail
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }

# shellcheck source=../../planner/cli/canzona.bash
source "$src/planner/cli/canzona.bash"
complete -p canzona > /dev/null 2>&1 || fail "sourcing does not register a completion for canzona"

# complete WORD...: the completions of the command line "canzona WORD...", the last word being
# the one under the cursor, one per line, sorted.
complete_line() {
  COMP_WORDS=(canzona "$@")
  COMP_CWORD=$#
  COMP_LINE="canzona $*"
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _canzona
  printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | sort -u
}
commands() { "$CZ" --help | sed -n '/^commands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }'; }
help_options() {
  "$CZ" "$1" --help | grep -E '^ {1,8}-' | sed -E 's/^ +//; s/^(-[A-Za-z]), /\1 /' |
    awk '{ print $1; if ($1 ~ /^-[A-Za-z]$/) print $2 }' | sort -u
}
# expect NAME WANTED(file) GOT(file): every line of WANTED is in GOT.
contains() {
  local lacking
  lacking=$(comm -23 "$2" "$3" | tr '\n' ' ')
  [ -z "$lacking" ] && pass "$1" || fail "$1: lacks $lacking"
}

commands | sort -u > "$work/commands"
[ "$(wc -l < "$work/commands")" -ge 8 ] || fail "fewer than 8 subcommands in 'canzona --help'"
complete_line "" > "$work/got"
contains "every subcommand is offered" "$work/commands" "$work/got"
complete_line pl > "$work/got"
[ "$(cat "$work/got")" = plan ] && pass "'pl' completes to plan" || fail "'pl' gives $(cat "$work/got")"
complete_line help "" > "$work/got"
contains "'help' offers the subcommands" "$work/commands" "$work/got"

for cmd in $(cat "$work/commands"); do
  help_options "$cmd" > "$work/want"
  complete_line "$cmd" - > "$work/got"
  if cmp -s "$work/want" "$work/got"; then
    pass "$cmd: the $(wc -l < "$work/want") options of its --help"
  else
    fail "$cmd: options differ from its --help (< --help, > completion): $(diff "$work/want" "$work/got" | grep '^[<>]' | tr '\n' ' ')"
  fi
done

# Option values.
value() { # NAME EXPECTED WORD...
  local name=$1 want=$2
  shift 2
  local got
  got=$(complete_line "$@" | tr '\n' ' ')
  [ "$got" = "$want" ] && pass "$name" || fail "$name: got '$got', expected '$want'"
}
value "--dp names" "alpha anchored even joint layerwise tpaware " plan --dp ""
value "--tp names starting with s" "sc single slot " simulate --tp s
value "--layerwise-order names" "lpt megatron megatron-aug26 pingpong " compare --layerwise-order ""
value "--dtype names" "bf16 fp16 fp32 " import-hf cfg.json --dtype ""
value "--muon-tp names" "blockwise distributed duplicated layer_sharded " simulate --muon-tp ""
value "a number: nothing" "" plan --alpha ""
# Every name offered is one the CLI accepts: an unknown one is refused with a message that
# names the option, a known one is not.
for opt in --dp --tp --optimizer --unit --solver --layerwise-order --alpha-loads; do
  for v in $(complete_line plan "$opt" ""); do
    "$CZ" plan "$opt" "$v" -m /nonexistent.json -c /nonexistent.json > "$work/out" 2>&1
    if grep -q -- "$opt" "$work/out"; then
      fail "plan $opt $v: the completion offers a name the CLI refuses: $(head -1 "$work/out")"
    fi
  done
done
"$CZ" plan --dp nosuch -m /nonexistent.json -c /nonexistent.json > "$work/out" 2>&1
grep -q -- "--dp" "$work/out" && pass "the names offered are accepted (an unknown one is refused)" ||
  fail "an unknown --dp name is not refused by name: $(head -1 "$work/out")"

# File names: after a file option and for positional arguments.
mkdir "$work/files"
touch "$work/files/model.json" "$work/files/mixed.json" "$work/files/plan.json"
cd "$work/files"
value "-m completes file names" "mixed.json model.json " plan -m m
value "--cluster completes file names" "mixed.json model.json plan.json " validate x.json --cluster ""
value "a positional argument completes file names" "plan.json " render p
value "render -o completes file names" "plan.json " render plan.json -o pl
cd - > /dev/null

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
