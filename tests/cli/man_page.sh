#!/usr/bin/env bash
# docs/canzona.1 describes every subcommand 'canzona --help' lists and every option each
# 'canzona <command> --help' lists (in the command's section, or in PLANNING SETTINGS / CLUSTER
# SIZES / DEVICE MODEL when the section refers to them), and groff formats it without a warning.
set -euo pipefail
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
man=$src/docs/canzona.1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

commands() { "$CZ" --help | sed -n '/^commands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }'; }
# Options of a command: the first word (and the long form after "-x, ") of each option line.
help_options() {
  "$CZ" "$1" --help | grep -E '^ {1,8}-' | sed -E 's/^ +//; s/^(-[A-Za-z]), /\1 /' |
    awk '{ print $1; if ($1 ~ /^-[A-Za-z]$/) print $2 }' | sort -u
}
# Prints the options (one per line in file $3) that the man page $1 lacks for command $2.
missing() {
  python3 - "$1" "$2" "$3" <<'PY'
import re, sys
text = open(sys.argv[1]).read().replace("\\-", "-")
cmd = sys.argv[2]
lines = text.splitlines()
def section(start):
    """Lines from the one starting with start to the next .SS or .SH."""
    out, inside = [], False
    for l in lines:
        if l.startswith(start):
            inside = True
        elif inside and (l.startswith(".SS") or l.startswith(".SH")):
            break
        if inside:
            out.append(l)
    return "\n".join(out)
block = section('.SS "canzona %s ' % cmd)
if not block:
    print("(no section .SS \"canzona %s ...\")" % cmd)
    sys.exit(0)
for shared in ("PLANNING SETTINGS", "CLUSTER SIZES", "DEVICE MODEL"):
    if shared in block:
        block += "\n" + section(".SH " + shared)
for opt in open(sys.argv[3]).read().split():
    if not re.search(r"(?<![A-Za-z0-9-])" + re.escape(opt) + r"(?![A-Za-z0-9-])", block):
        print(opt)
PY
}

n=0
for cmd in $(commands); do
  help_options "$cmd" > "$work/opts"
  [ -s "$work/opts" ] || { echo "FAIL $cmd: no options found in its --help"; fails=$((fails + 1)); }
  missing "$man" "$cmd" "$work/opts" > "$work/missing"
  if [ -s "$work/missing" ]; then
    echo "FAIL $cmd: --help lists options the man page lacks: $(tr '\n' ' ' < "$work/missing")"
    fails=$((fails + 1))
  else
    echo "ok   $cmd: $(wc -l < "$work/opts") options described"
  fi
  n=$((n + 1))
done
[ "$n" -ge 8 ] || { echo "FAIL only $n subcommands found in 'canzona --help'"; fails=$((fails + 1)); }

# The check can fail: an option the page does not have, and a command it does not have.
printf '%s\n' --no-such-option > "$work/opts"
missing "$man" plan "$work/opts" > "$work/neg"
grep -qx -- --no-such-option "$work/neg" && echo "ok   an undocumented option is reported" ||
  { echo "FAIL an undocumented option is not reported"; fails=$((fails + 1)); }
printf '%s\n' --json > "$work/opts"
missing "$man" no-such-command "$work/opts" > "$work/neg"
grep -q "no section" "$work/neg" && echo "ok   an undocumented command is reported" ||
  { echo "FAIL an undocumented command is not reported"; fails=$((fails + 1)); }

if command -v groff > /dev/null; then
  groff -man -Tutf8 -ww -z "$man" > "$work/groff.txt" 2>&1
  if [ -s "$work/groff.txt" ]; then
    echo "FAIL groff warns:"; cat "$work/groff.txt"; fails=$((fails + 1))
  else
    echo "ok   groff formats the page without warnings"
  fi
fi
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
