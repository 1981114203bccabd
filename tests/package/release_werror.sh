#!/usr/bin/env bash
# The planner library as users build it (CMAKE_BUILD_TYPE=Release: -O3 -DNDEBUG), with warnings
# as errors. GCC 12 at -O3 reported maybe-uninitialized in microgroups.c (issue 24, defect 7:
# schedule_rollback's assertion returned without setting the makespan its callers read), which
# the RelWithDebInfo (-O2) build of tools/test.sh never saw. The whole Release build is compiled
# warnings-as-errors by tests/package/relocatable.sh; this is the cheap part of it (the planner
# library alone, about 10 s on two cores), which runs even where that test is skipped.
# Usage: release_werror.sh <source dir> <C compiler>
set -euo pipefail
src=$1 cc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -S "$src" -B "$tmp/b" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release -DCZ_WERROR=ON \
  -DCZ_WITH_CUDA=OFF -DCZ_WITH_MPI=OFF -DCZ_SHARED=OFF > "$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; exit 1; }
# The flags the test means to use (a change of CMake's defaults would make it test nothing).
flags=$(grep -h '^C_FLAGS' "$tmp/b/planner/lib/CMakeFiles/canzona.dir/flags.make")
for f in -O3 -Werror; do
  case " $flags " in
    *" $f "*) ;;
    *) echo "FAIL: the Release build of the planner library is not compiled with $f: $flags"; exit 1 ;;
  esac
done
cmake --build "$tmp/b" --target canzona -j 2 > "$tmp/build.log" 2>&1 ||
  { grep -E 'error:|warning:' "$tmp/build.log" || cat "$tmp/build.log"; exit 1; }
echo "ok: the planner library builds at Release (-O3) with warnings as errors"
