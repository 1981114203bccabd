#!/usr/bin/env bash
# The relocatable package on a system that has none of its dependencies (issue 24):
#   1. tools/package.sh builds it (Release, CZ_WERROR=ON: CI's warnings-as-errors build at the
#      optimisation level users build with) into this test's temporary folder;
#   2. a root file system is made that holds glibc (with libgcc_s, which glibc loads), bash, sh,
#      coreutils, grep and sed, copied from this machine with their libraries, and the package
#      unpacked under /opt;
#   3. inside it (chroot, in private mount and PID namespaces): every ELF file of the package
#      resolves its libraries from the package or glibc (only NVIDIA's may be missing), jansson,
#      OpenBLAS, LAPACKE, libgfortran, GLPK, Open MPI, PMIx and hwloc exist only in the package;
#      canzona plan; canzona-bench --verify at 4 ranks under the package's mpirun and at 1 rank
#      without it (an MPI singleton, after libexec/canzona/mpi-env.sh); gpu_linalg harness (SOAP
#      and Shampoo, cpu against cpu: LAPACKE, OpenBLAS, libgfortran); gpu_exec probe; and
#      bin/canzona-gpu-check where the package has one, which must pass and report its GPU parts
#      skipped (no device).
#
# Why this root file system and not a minimal Debian from debootstrap: debootstrap needs the
# network and minutes on every CI run, and its base system would bring packages of its own
# (zlib, libudev, libgmp, ...) that the package carries too. A folder with only glibc, a shell
# and the core tools is the system the package promises to run on; it is made offline in
# seconds, from the same glibc the package was built against. /proc (of a new PID namespace),
# /dev (a tmpfs with null, zero, full, random, urandom and tty; /dev/shm a tmpfs for Open MPI's
# shared memory), /sys (read only, for hwloc's topology) and /tmp are all the rest. The mounts
# live in a private mount namespace, so they vanish with its processes even if the test is
# killed; the folder is removed on exit.
#
# Needs root (chroot, mount, unshare): otherwise, or where namespaces or mounts are refused, it
# exits 77 (skipped) after building the package.
# Usage: relocatable.sh <source dir>
# Env:   CZ_PACKAGE=<tarball>: test that package instead of building one
set -euo pipefail

# --enter <root> <command>...: run inside the private namespaces (below) as their first process:
# mount /proc, /sys, /dev and /dev/shm into the root, then chroot. Device nodes by mknod, else
# bound from the host's.
if [ "${1:-}" = --enter ]; then
  root=$2
  shift 2
  cant() { echo "SKIPPED: $*"; exit 77; }
  mount -t proc proc "$root/proc" || cant "mounting /proc in the root is not permitted"
  mount -t sysfs -o ro sysfs "$root/sys" 2> /dev/null || mount --rbind -o ro /sys "$root/sys" ||
    cant "mounting /sys in the root is not permitted"
  mount -t tmpfs -o mode=755,size=1m dev "$root/dev" || cant "mounting a tmpfs on /dev is not permitted"
  for node in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
    IFS=: read -r n major minor <<< "$node"
    mknod -m 666 "$root/dev/$n" c "$major" "$minor" 2> /dev/null ||
      { touch "$root/dev/$n" && mount --bind "/dev/$n" "$root/dev/$n"; } ||
      cant "neither mknod nor a bind mount of /dev/$n is permitted"
  done
  ln -s /proc/self/fd "$root/dev/fd"
  mkdir "$root/dev/shm"
  mount -t tmpfs -o mode=1777,size=1g shm "$root/dev/shm" || cant "mounting /dev/shm is not permitted"
  chroot "$root" /bin/true || cant "chroot is not permitted"
  exec chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C "$@"
fi

src=$(cd "$1" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cz-relocatable.XXXXXX")
root=$tmp/root
# --one-file-system: should a mount outlive its namespace, rm stays off it.
trap 'rm -rf --one-file-system "$tmp"' EXIT
start=$SECONDS

if [ -n "${CZ_PACKAGE:-}" ]; then
  tarball=$CZ_PACKAGE
  echo "== $tarball (CZ_PACKAGE: not built here) =="
else
  echo "== tools/package.sh (CZ_WERROR=ON) =="
  CZ_WERROR=ON CZ_PACKAGE_BUILD=$tmp/build bash "$src/tools/package.sh" "$tmp"
  tarball=$(find "$tmp" -maxdepth 1 -name 'canzona-*-linux-*.tar.gz')
  # The flags this build means to use (a change of CMake's defaults would make it test
  # nothing): -O3 (what users build, where GCC 12 once found a maybe-uninitialized the -O2 build
  # never saw; issue 24, defect 7) and -Werror, checked on the planner library and the executor.
  for lib in planner/lib/CMakeFiles/canzona.dir executor/CMakeFiles/canzona_exec.dir; do
    [ -f "$tmp/build/$lib/flags.make" ] ||
      { echo "FAIL: no $lib/flags.make in the package's build (the targets were renamed?)"; exit 1; }
    flags=$(grep -h '^C_FLAGS' "$tmp/build/$lib/flags.make")
    for f in -O3 -Werror; do
      case " $flags " in
      *" $f "*) ;;
      *) echo "FAIL: the package's Release build of $lib is not compiled with $f: $flags"; exit 1 ;;
      esac
    done
  done
fi
name=$(basename "$tarball" .tar.gz)
echo "package size: $(stat -c %s "$tarball") bytes ($(numfmt --to=iec-i --suffix=B "$(stat -c %s "$tarball")"))"

built=""
[ -n "${CZ_PACKAGE:-}" ] || built="; the package was built"
skip() { echo "SKIPPED: $*$built"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "the isolation test needs root (chroot, mount)"
for tool in chroot unshare mount; do
  command -v "$tool" > /dev/null || skip "$tool not found"
done
unshare --mount --pid --fork --propagation private true 2> /dev/null ||
  skip "mount and PID namespaces are not permitted here (unshare)"

# ---- the root file system --------------------------------------------------------------------------
mkdir -p "$root"/{proc,dev,sys,tmp,root,etc,opt}
chmod 1777 "$root/tmp"
# The host's merged-/usr links, so that files land where the host's loader paths say.
for d in bin sbin lib lib64 lib32; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$root/$d"; mkdir -p "$root/$(readlink -f "/$d")"; fi
done
put() { # put <host file>: the file (symbolic links followed) at the same path in the root
  [ -e "$root$1" ] && return 0
  mkdir -p "$root$(dirname "$1")"
  cp -L "$1" "$root$1"
}
put_with_libs() { # put_with_libs <host file>...: the files and their libraries (ldd)
  local f lib
  for f in "$@"; do
    put "$f"
    while read -r lib; do put "$lib"; done < <(ldd "$f" 2> /dev/null | sed -n 's/.*=> \(\/\S*\).*/\1/p; s/^\s*\(\/\S*\) (.*/\1/p')
  done
}
tools=(/bin/bash /bin/sh "$(command -v grep)" "$(command -v sed)")
if command -v dpkg-query > /dev/null; then
  mapfile -t -O "${#tools[@]}" tools < <(dpkg-query -L coreutils | grep -E '^/(usr/)?s?bin/')
else
  for t in cat chmod cp cut date dirname basename echo env head id ln ls mkdir mktemp mv numfmt \
    pwd readlink rm sleep sort stat tail tee timeout touch tr true false uname wc; do
    tools+=("$(command -v "$t")")
  done
fi
put_with_libs "${tools[@]}"
interp=$(readelf -l /bin/bash | sed -n 's/.*program interpreter: \(\S*\)\]/\1/p')
put "$interp"
# glibc and the compiler runtime as the package's files need them (libgcc_s among them).
tar -C "$root/opt" -xzf "$tarball"
pkg=/opt/$name
find "$root$pkg" -type f \( -name '*.so*' -o -perm -u+x \) -print0 |
  while IFS= read -r -d '' f; do
    while read -r lib; do
      case $lib in "$root"*) ;; *) put "$lib" ;; esac
    done < <(ldd "$f" 2> /dev/null | sed -n 's/.*=> \(\/\S*\).*/\1/p')
  done
printf 'root:x:0:0:root:/root:/bin/bash\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"
printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$(uname -n)" > "$root/etc/hosts"
echo "root file system: $(find "$root" -type f | wc -l) files, $(du -sh "$root" | cut -f1) (package included)"

# ---- inside ---------------------------------------------------------------------------------------------
cp "$src/tests/package/relocatable_inside.sh" "$root/run.sh"

# Private mount and PID namespaces: the mounts and every process (mpirun's ranks included) end
# with the namespace.
echo "== inside the root file system (chroot) =="
unshare --mount --pid --fork --propagation private \
  bash "${BASH_SOURCE[0]}" --enter "$root" /bin/bash /run.sh "$pkg" "$interp"
echo "ok: the package runs where none of its dependencies is installed ($((SECONDS - start)) s)"
