#!/usr/bin/env bash
# One version number everywhere: project(canzona VERSION ...) in the top CMakeLists.txt is the
# only place it is set, and this test fails when anything reports another:
#   * canzona_version.h (CZ_VERSION, CZ_VERSION_MAJOR/MINOR/PATCH), generated from it;
#   * `canzona --version` and the generator version a plan file records;
#   * cz_version() of libcanzona.so and of libcanzona-exec.so (string and parts);
#   * tools/package.sh (the name it gives the package of this build);
#   * the Python package: canzona.__version__ and pyproject.toml, which reads it from there.
# Usage: version.sh <project version> <canzona CLI> <libcanzona.so> <libcanzona-exec.so>
#        <generated include dir> <build dir> <source dir>
set -euo pipefail
want=$1 cli=$2 lib=$3 exec_lib=$4 gen=$5 build=$6 src=$7
fail=0
check() { # <what> <value>
  if [ "$2" = "$want" ]; then
    echo "ok: $1: $2"
  else
    echo "FAIL: $1 reports '$2', the project's version is $want"; fail=1
  fi
}

hdr=$gen/canzona_version.h
parts=$(sed -n 's/^#define CZ_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$hdr" | paste -sd.)
check "canzona_version.h CZ_VERSION_MAJOR.MINOR.PATCH" "$parts"
check "canzona_version.h CZ_VERSION" "$(sed -n 's/^#define CZ_VERSION "\(.*\)"$/\1/p' "$hdr")"

check "canzona --version" "$("$cli" --version | sed -n 's/^canzona \([^ ]*\) .*/\1/p')"
plan=$("$cli" plan -q -m "$src/tests/data/model_tiny.json" -c "$src/tests/data/cluster_tiny.json" -o -)
check "a plan's generator.version" \
  "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["generator"]["version"])' <<< "$plan")"

for l in "$lib" "$exec_lib"; do
  check "cz_version() of $(basename "$l")" "$(python3 - "$l" <<'PY'
import ctypes, sys
f = ctypes.CDLL(sys.argv[1]).cz_version
f.restype = ctypes.c_char_p
f.argtypes = [ctypes.POINTER(ctypes.c_int)] * 3
a, b, c = ctypes.c_int(-1), ctypes.c_int(-1), ctypes.c_int(-1)
s = f(ctypes.byref(a), ctypes.byref(b), ctypes.byref(c)).decode()
print(s if s == "%d.%d.%d" % (a.value, b.value, c.value) else "%s (parts %d.%d.%d)" % (s, a.value, b.value, c.value))
PY
)"
done

check "tools/package.sh" "$(CZ_PACKAGE_BUILD=$build bash "$src/tools/package.sh" --print-version)"

check "canzona.__version__ (python/canzona/__init__.py)" "$(python3 - "$src/python/canzona/__init__.py" <<'PY'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
           and any(getattr(t, "id", "") == "__version__" for t in n.targets)))
PY
)"
# pyproject.toml has no version of its own: it takes canzona.__version__.
if ! python3 - "$src/python/pyproject.toml" <<'PY'
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
sys.exit(not ("version" not in c["project"] and "version" in c["project"].get("dynamic", [])
              and c["tool"]["setuptools"]["dynamic"]["version"]["attr"] == "canzona.__version__"))
PY
then
  echo "FAIL: python/pyproject.toml must take its version from canzona.__version__ (dynamic)"
  fail=1
fi
# And the package, loaded, asks its library the same, with the tests' Python (CZ_PYTHON, the
# environment tools/setup.sh makes; importing the package needs NumPy).
py=${CZ_PYTHON:-}
if [ -z "$py" ] || ! "$py" -c 'import numpy' 2> /dev/null; then
  echo "FAIL: no Python with NumPy for the package (CZ_PYTHON='$py'; run tools/setup.sh)"
  fail=1
else
  check "canzona.library_version() ($py)" "$(CANZONA_EXEC_LIB=$exec_lib PYTHONPATH=$src/python \
    PYTHONDONTWRITEBYTECODE=1 "$py" -c 'import canzona; print(canzona.library_version())')"
fi
[ "$fail" -eq 0 ]
