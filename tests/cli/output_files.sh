#!/usr/bin/env bash
# Where `canzona plan`, `render` and `import-hf` write: a FIFO, a character device and a symbolic
# link stay what they are (the FIFO's reader and the link's target get the output), a read-only
# file or a folder is refused, '-' is standard output, an existing file keeps its mode, and an
# output that is one of the inputs (by another path, a hard link or a symbolic link) is refused
# with the input left intact. Everything happens inside one mktemp -d folder.
set -u
: "${CZ:?CZ must point at the canzona binary}" "${CZ_SOURCE_DIR:?}"
[ -x "$CZ" ] || { echo "skip: $CZ not built"; exit 77; }
command -v mkfifo >/dev/null || { echo "skip: mkfifo missing"; exit 77; }

CZ=$(cd "$(dirname "$CZ")" && pwd)/$(basename "$CZ")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Run inside the temporary folder: a writer that took '-' for a file name would leave it here.
cd "$work" || exit 1
cp "$CZ_SOURCE_DIR/tests/data/model_tiny.json" "$work/model.json"
cp "$CZ_SOURCE_DIR/tests/data/cluster_tiny.json" "$work/cluster.json"
cp "$CZ_SOURCE_DIR/tests/data/hf/mixtral-tiny.config.json" "$work/config.json"
M="$work/model.json"
C="$work/cluster.json"
H="$work/config.json"
fails=0
total=0
pass() { total=$((total + 1)); echo "ok   $*"; }
fail() { total=$((total + 1)); fails=$((fails + 1)); echo "FAIL $*"; }

"$CZ" plan -m "$M" -c "$C" -o "$work/plan.json" -q || { echo "FAIL: cannot build a plan"; exit 1; }
P="$work/plan.json"

# The three writers, each given its output path as $1 (bounded in time: a FIFO without a
# reader would block).
write_plan() { timeout 20 "$CZ" plan -m "$M" -c "$C" -q -o "$1"; }
write_render() { timeout 20 "$CZ" render "$P" -o "$1"; }
write_import() { timeout 20 "$CZ" import-hf "$H" -o "$1"; }
# What each writer's output starts with.
declare -A head=([plan]='"schema": "canzona.plan/1"' [render]='<svg' [import]='"schema": "canzona.model/1"')

for w in plan render import; do
  # ---- FIFO: written in place, read by whoever waits on it -------------------------------
  fifo="$work/$w.fifo"
  mkfifo "$fifo"
  timeout 20 cat "$fifo" >"$work/$w.from-fifo" &
  reader=$!
  if "write_$w" "$fifo" 2>"$work/err"; then
    wait $reader
    if [ -p "$fifo" ] && grep -q "${head[$w]}" "$work/$w.from-fifo"; then
      pass "$w -o FIFO: written through the FIFO, which is still a FIFO"
    else
      fail "$w -o FIFO: FIFO replaced or reader got nothing ($(stat -c %F "$fifo"))"
    fi
  else
    kill $reader 2>/dev/null
    wait $reader 2>/dev/null
    fail "$w -o FIFO: exit non-zero: $(cat "$work/err")"
  fi
  ls "$work/$w".fifo.tmp* >/dev/null 2>&1 && fail "$w -o FIFO: temporary file left behind"

  # ---- symbolic link: followed, the target (in another folder) replaced, the link kept ----
  mkdir -p "$work/$w-target-dir"
  echo old >"$work/$w-target-dir/out"
  ln -s "$w-target-dir/out" "$work/$w.link"
  if "write_$w" "$work/$w.link" >"$work/out" 2>"$work/err" && [ -L "$work/$w.link" ] &&
    [ "$(readlink "$work/$w.link")" = "$w-target-dir/out" ] &&
    grep -q "${head[$w]}" "$work/$w-target-dir/out"; then
    pass "$w -o SYMLINK: the link's target was written, the link kept"
  else
    fail "$w -o SYMLINK: link replaced or target not written ($(stat -c %F "$work/$w.link")): $(cat "$work/err")"
  fi
  # A link to a file that does not exist yet creates the file, not a regular file for the link.
  ln -s "$w-target-dir/new" "$work/$w.dangling"
  if "write_$w" "$work/$w.dangling" >"$work/out" 2>"$work/err" && [ -L "$work/$w.dangling" ] &&
    grep -q "${head[$w]}" "$work/$w-target-dir/new"; then
    pass "$w -o DANGLING-SYMLINK: target created, link kept"
  else
    fail "$w -o DANGLING-SYMLINK: $(cat "$work/err")"
  fi

  # ---- a read-only file is refused, even for root, and left as it was -------------------
  echo keep >"$work/$w.ro"
  chmod 444 "$work/$w.ro"
  if "write_$w" "$work/$w.ro" >"$work/out" 2>"$work/err"; then
    fail "$w -o READ-ONLY: accepted"
  elif [ "$(cat "$work/$w.ro")" = keep ] && grep -q "read-only" "$work/err"; then
    pass "$w -o READ-ONLY: refused with a reason, file intact"
  else
    fail "$w -o READ-ONLY: file changed or no reason: $(cat "$work/err")"
  fi

  # ---- a folder is refused --------------------------------------------------------------
  mkdir "$work/$w.dir"
  if ! "write_$w" "$work/$w.dir" >"$work/out" 2>"$work/err" && grep -q "folder" "$work/err" &&
    [ -d "$work/$w.dir" ]; then
    pass "$w -o FOLDER: refused"
  else
    fail "$w -o FOLDER: $(cat "$work/err")"
  fi

  # ---- an existing regular file is replaced whole and keeps its mode ---------------------
  echo old >"$work/$w.mode"
  chmod 640 "$work/$w.mode"
  if "write_$w" "$work/$w.mode" >"$work/out" 2>"$work/err" &&
    [ "$(stat -c %a "$work/$w.mode")" = 640 ] && grep -q "${head[$w]}" "$work/$w.mode"; then
    pass "$w -o FILE: replaced, mode 640 kept"
  else
    fail "$w -o FILE: mode $(stat -c %a "$work/$w.mode"): $(cat "$work/err")"
  fi

  # ---- '-' is standard output -----------------------------------------------------------
  if "write_$w" - >"$work/$w.stdout" 2>"$work/err" && grep -q "${head[$w]}" "$work/$w.stdout" &&
    [ ! -e "$work/-" ]; then
    pass "$w -o -: standard output"
  else
    fail "$w -o -: $(cat "$work/err")"
  fi
done

# plan -o - keeps standard output pure JSON: the summary goes to standard error.
if "$CZ" plan -m "$M" -c "$C" -o - >"$work/plan-stdout.json" 2>"$work/err" &&
  "$CZ" validate "$work/plan-stdout.json" --model "$M" --cluster "$C" >"$work/out" 2>&1 &&
  grep -q "DP imbalance" "$work/err"; then
  pass "plan -o -: a valid plan on standard output, the summary on standard error"
else
  fail "plan -o -: $(cat "$work/err" "$work/out")"
fi

# ---- a character device: written in place (a private null device, when mknod works) ------
if mknod "$work/null" c 1 3 2>/dev/null; then
  for w in plan render import; do
    if "write_$w" "$work/null" >"$work/out" 2>"$work/err" && [ -c "$work/null" ]; then
      pass "$w -o CHAR-DEVICE: written in place, still a character device"
    else
      fail "$w -o CHAR-DEVICE: $(stat -c %F "$work/null"): $(cat "$work/err")"
    fi
  done
else
  echo "note: mknod not permitted here; the character-device case is covered by the FIFO one"
fi

# ---- an output that is an input is refused, the input intact -------------------------------
# expect_same NAME INPUT-FILE COMMAND...: exit 1, a message naming the clash, INPUT unchanged.
expect_same() {
  local name=$1 input=$2
  shift 2
  cp "$input" "$work/before"
  if "$@" >"$work/out" 2>"$work/err"; then
    fail "$name: accepted"
  elif ! grep -q "same file as" "$work/err"; then
    fail "$name: no clear message: $(cat "$work/err")"
  elif ! cmp -s "$work/before" "$input"; then
    fail "$name: the input was changed"
  else
    pass "$name: refused, input intact"
  fi
}
mkdir "$work/sub"
ln "$M" "$work/model-hard.json"
ln -s model.json "$work/model-soft.json"
ln "$P" "$work/plan-hard.json"
ln -s ../config.json "$work/sub/config-soft.json"
expect_same "plan -o MODEL" "$M" "$CZ" plan -m "$M" -c "$C" -o "$M"
expect_same "plan -o CLUSTER" "$C" "$CZ" plan -m "$M" -c "$C" -o "$C"
expect_same "plan -o MODEL by another path" "$M" "$CZ" plan -m "$M" -c "$C" -o "$work/sub/../model.json"
expect_same "plan -o hard link to MODEL" "$M" "$CZ" plan -m "$M" -c "$C" -o "$work/model-hard.json"
expect_same "plan -o symlink to MODEL" "$M" "$CZ" plan -m "$M" -c "$C" -o "$work/model-soft.json"
expect_same "render P -o P" "$P" "$CZ" render "$P" -o "$P"
expect_same "render P -o hard link to P" "$P" "$CZ" render "$P" -o "$work/plan-hard.json"
expect_same "render --cluster C -o C" "$C" "$CZ" render "$P" --cluster "$C" -o "$C"
expect_same "import-hf C -o C" "$H" "$CZ" import-hf "$H" -o "$H"
expect_same "import-hf C -o symlink to C" "$H" "$CZ" import-hf "$H" -o "$work/sub/config-soft.json"

# ---- symbolic links in a sticky world-writable folder (/tmp): what the kernel refuses ----------
# Under fs.protected_symlinks the kernel follows such a link only for its owner or when the
# folder's owner owns it; canzona resolves links itself, so it applies the same rule. Making a
# link owned by another user takes root.
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
  mkdir "$work/sticky"
  chmod 1777 "$work/sticky"
  echo keep >"$work/victim"
  ln -s "$work/victim" "$work/sticky/theirs"
  chown -h nobody "$work/sticky/theirs"
  if write_plan "$work/sticky/theirs" >"$work/out" 2>"$work/err"; then
    fail "plan -o LINK-OF-ANOTHER-USER in a sticky folder: followed"
  elif [ "$(cat "$work/victim")" = keep ] && grep -q "protected_symlinks" "$work/err" &&
    [ -L "$work/sticky/theirs" ]; then
    pass "plan -o LINK-OF-ANOTHER-USER in a sticky folder: refused, target and link intact"
  else
    fail "plan -o LINK-OF-ANOTHER-USER in a sticky folder: $(cat "$work/err")"
  fi
  # The same link further down a chain of links is refused too.
  ln -s sticky/theirs "$work/chain"
  if ! write_render "$work/chain" >"$work/out" 2>"$work/err" && [ "$(cat "$work/victim")" = keep ]; then
    pass "render -o LINK -> LINK-OF-ANOTHER-USER: refused, target intact"
  else
    fail "render -o LINK -> LINK-OF-ANOTHER-USER: $(cat "$work/err")"
  fi
  # Followed: a link of this user, and a link of the folder's owner.
  ln -s "$work/victim" "$work/sticky/mine"
  if write_plan "$work/sticky/mine" >"$work/out" 2>"$work/err" && grep -q "${head[plan]}" "$work/victim"; then
    pass "plan -o OWN-LINK in a sticky folder: followed"
  else
    fail "plan -o OWN-LINK in a sticky folder: $(cat "$work/err")"
  fi
  echo keep >"$work/victim"
  chown nobody "$work/sticky"
  if write_plan "$work/sticky/theirs" >"$work/out" 2>"$work/err" && grep -q "${head[plan]}" "$work/victim"; then
    pass "plan -o LINK-OF-THE-FOLDER'S-OWNER in a sticky folder: followed"
  else
    fail "plan -o LINK-OF-THE-FOLDER'S-OWNER in a sticky folder: $(cat "$work/err")"
  fi
else
  echo "note: not root (or no user 'nobody'): the sticky-folder link cases are skipped"
fi

# ---- a report to a full device: a failure with the reason, never exit 0 with nothing ------
# /dev/full fails every write with ENOSPC (as a full tmpfs does); standard output is only
# opened on it, never replaced. Standard output is buffered, so the error shows only when the
# text is flushed, after the command has done its work.
if [ -w /dev/full ]; then
  expect_full() { # NAME COMMAND...
    local name=$1 rc=0
    shift
    "$@" >/dev/full 2>"$work/err" || rc=$?
    if [ "$rc" -ne 0 ] && grep -q "cannot write to standard output: No space left on device" "$work/err"; then
      pass "$name >/dev/full: exit $rc with the reason"
    else
      fail "$name >/dev/full: exit $rc: $(cat "$work/err")"
    fi
  }
  expect_full "inspect" "$CZ" inspect "$P"
  expect_full "inspect --json" "$CZ" inspect "$P" --json
  expect_full "validate" "$CZ" validate "$P" -m "$M" -c "$C"
  expect_full "simulate" "$CZ" simulate -m "$M" -c "$C"
  expect_full "compare" "$CZ" compare -m "$M" -c "$C"
  expect_full "diff" "$CZ" diff "$P" "$P"
  expect_full "plan --json" "$CZ" plan -m "$M" -c "$C" --json -o "$work/full.plan.json"
  expect_full "plan -o -" "$CZ" plan -m "$M" -c "$C" -q -o -
  expect_full "render -o -" "$CZ" render "$P" -o -
  expect_full "--help" "$CZ" --help
else
  echo "note: no writable /dev/full here; the full-output cases are skipped"
fi

echo "$((total - fails)) passed, $fails failed"
[ $fails -eq 0 ]
