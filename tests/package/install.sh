#!/usr/bin/env bash
# cmake --install into a temporary prefix, then consumers of the installed tree only:
#   * the manual page and bash completion are installed and work;
#   * the installed canzona CLI writes a plan;
#   * a planner program built with pkg-config (canzona) builds the same plan through the library,
#     and the analysis program (tests/package/analysis) gives what the installed CLI gives;
#   * the consumer program (tests/package/consumer) built with find_package(canzona) and again
#     with pkg-config (canzona-exec) runs it and prints what the in-tree static build prints;
#   * the consumers load the installed shared libraries.
# Usage: install.sh <build dir> <reference consumer> <source dir>
set -euo pipefail
build=$1 reference=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
for f in bin/canzona include/canzona.h include/canzona_format.h include/canzona_exec.h share/man/man1/canzona.1 \
  share/bash-completion/completions/canzona; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'libcanzona-exec.so' | head -1)")
[ -n "$libdir" ] && [ -e "$libdir/libcanzona.so" ] || { echo "FAIL: shared libraries not installed"; exit 1; }
export PKG_CONFIG_PATH=$libdir/pkgconfig

# The installed manual page formats, and the installed completion offers the installed CLI's
# subcommands when sourced by bash.
if command -v groff > /dev/null; then
  groff -man -Tutf8 "$prefix/share/man/man1/canzona.1" > "$tmp/man.txt" 2>&1
  grep -q "canzona validate" "$tmp/man.txt" || { echo "FAIL: the installed man page does not format"; exit 1; }
fi
bash -c 'source "$1/share/bash-completion/completions/canzona"
  COMP_WORDS=(canzona "") COMP_CWORD=1; _canzona; printf "%s\n" "${COMPREPLY[@]}"' _ "$prefix" > "$tmp/compl.txt"
grep -qx validate "$tmp/compl.txt" || { echo "FAIL: the installed bash completion offers no subcommands"; exit 1; }

cluster=$src/plans/clusters/cpu-1.json
model=$src/tests/data/model_tiny.json
"$prefix/bin/canzona" plan -q -m "$model" -c "$cluster" -o "$tmp/cli.plan.json"

# The planner through libcanzona.so, with pkg-config.
cat > "$tmp/planner.c" <<'C'
#include <canzona.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    cz_error err;
    cz_error_clear(&err);
    cz_model *m = NULL;
    cz_cluster *c = NULL;
    cz_plan *p = NULL;
    cz_settings s;
    cz_settings_init(&s);
    int rc = cz_model_load(&m, argv[1], &err);
    if (!rc) rc = cz_cluster_load(&c, argv[2], &err);
    if (!rc) rc = cz_plan_build(&p, m, c, &s, &err);
    if (!rc) rc = cz_plan_write(p, argv[3], &err);
    if (rc) fprintf(stderr, "planner: %s\n", err.message);
    cz_plan_free(p);
    cz_cluster_free(c);
    cz_model_free(m);
    return rc ? 1 : 0;
}
C
cc -std=c17 -o "$tmp/planner" "$tmp/planner.c" $(pkg-config --cflags --libs canzona) \
  -Wl,-rpath,"$libdir"
"$tmp/planner" "$model" "$cluster" "$tmp/lib.plan.json"
cmp "$tmp/cli.plan.json" "$tmp/lib.plan.json" || { echo "FAIL: library plan differs from the CLI's"; exit 1; }

# The analysis functions of the installed canzona.h against the installed CLI.
cc -std=c17 -o "$tmp/analysis" "$src/tests/package/analysis/analysis.c" \
  $(pkg-config --cflags --libs canzona) -lm -Wl,-rpath,"$libdir"
bash "$src/tests/package/analysis/analysis.sh" "$prefix/bin/canzona" "$tmp/analysis" "$src" > "$tmp/analysis.log" ||
  { cat "$tmp/analysis.log"; exit 1; }

# The executor consumer, with find_package and with pkg-config.
cmake -S "$src/tests/package/consumer" -B "$tmp/b" -DCZ_CONSUME=package \
  -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/b" > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
cc -std=c17 -o "$tmp/pc_consumer" "$src/tests/package/consumer/consumer.c" \
  $(pkg-config --cflags --libs canzona-exec) -Wl,-rpath,"$libdir"
"$reference" "$tmp/cli.plan.json" > "$tmp/reference.txt"
for exe in "$tmp/b/consumer" "$tmp/pc_consumer"; do
  # Into a file first: with pipefail, grep -q quitting early could fail ldd with SIGPIPE.
  ldd "$exe" > "$tmp/ldd.txt"
  grep -q "libcanzona-exec.so.* => $libdir/" "$tmp/ldd.txt" ||
    { echo "FAIL: $exe does not load the installed libcanzona-exec.so"; cat "$tmp/ldd.txt"; exit 1; }
  "$exe" "$tmp/cli.plan.json" > "$tmp/out.txt"
  cmp -s "$tmp/out.txt" "$tmp/reference.txt" ||
    { echo "FAIL: $exe printed"; cat "$tmp/out.txt" "$tmp/reference.txt"; exit 1; }
done
echo "ok: installed; find_package and pkg-config consumers: $(cat "$tmp/reference.txt")"
