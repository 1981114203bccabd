#!/usr/bin/env bash
# The relocatable binary package: canzona-<version>-linux-<arch>.tar.gz, one folder
# canzona-<version>-linux-<arch>/ that runs from wherever it is unpacked, on a machine that has
# glibc and little else (a GPU node or an HPC node without our Debian dependencies or root).
#
#   bin/           canzona, canzona-bench, mpirun (a wrapper: below), canzona-gpu-check (when
#                  the tree has tools/gpu_check.sh)
#   lib/           our shared libraries (and the CUDA backend's plugin when built) and every
#                  library they need but glibc, the compiler runtime and NVIDIA's: jansson, GLPK
#                  and its deps, OpenBLAS, LAPACKE/LAPACK/BLAS, libgfortran, libquadmath, Open
#                  MPI, PMIx, hwloc, libevent, ...
#   lib/openmpi/   Open MPI's plugins (those a single-node shared-memory run can use: no UCX,
#                  libfabric, verbs or PSM ones); lib/pmix/: PMIx's
#   libexec/openmpi/  Open MPI's real launcher (orterun), orted and ompi_info
#   libexec/canzona/  the GPU test programs (gpu_exec, gpu_linalg), versus.py (the check's versus
#                  part), mpi-env.sh
#   etc/, share/openmpi, share/pmix   Open MPI's and PMIx's configuration and help texts
#   share/canzona/ plans/ (models, clusters), python/ (the Python package), tests/data/
#                  (test inputs); share/canzona works as CZ_SOURCE_DIR for scripts that read
#                  plans/... and tests/data/...
#   include/, lib/pkgconfig, lib/cmake, share/man, ...   what cmake --install puts there
#
# Every ELF file's RUNPATH is $ORIGIN-relative to lib/ (patchelf). Left out on purpose, found on
# the machine:
#   * glibc's libraries (libc, libm, ld-linux, ...): the package must run on newer glibc
#     systems, and a glibc is only usable with its own ld.so; the highest GLIBC_ symbol version
#     the package needs is printed;
#   * the compiler runtime libgcc_s.so.1 and libstdc++.so.6: every glibc system has them (glibc
#     itself loads libgcc_s), NVIDIA's libraries take them from the system too, and an older
#     copy loaded first would refuse a newer system library's symbol versions;
#   * NVIDIA's libraries (libcuda, libcudart, cuBLAS, cuSOLVER, cuSPARSE, nvJitLink, NCCL, ...):
#     the driver's must match the machine, the rest is found at run time by the CUDA backend's
#     plugin. Only lib/libcanzona-cuda*.so may need them; anything else that does is an error.
#
# bin/mpirun sources libexec/canzona/mpi-env.sh, which points Open MPI (OPAL_*DIR) and PMIx
# (PMIX_*DIR, PMIX_MCA_mca_base_component_path) at the package's plugins, configuration and help
# texts, and selects a single-node launch (plm isolated) and the shared-memory transports (pml
# ob1, btl self,vader) unless the caller's environment already chose; then it execs the real
# launcher. The ranks inherit that
# environment. A program of the package that initializes MPI without mpirun (a singleton, e.g.
# libexec/canzona/gpu_exec) needs the same: source mpi-env.sh first.
#
# Usage: tools/package.sh [OUTDIR]      (default: the source tree's top folder)
#        tools/package.sh --print-version  the version the package of the build in
#                                          CZ_PACKAGE_BUILD is named with, and nothing else
# Env:   CZ_WERROR (OFF; CI: ON), CZ_WITH_CUDA (ON: CUDA when a toolkit is found),
#        CZ_PACKAGE_BUILD (build folder, default build-package), CZ_JOBS (default: nproc)
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CZ_PACKAGE_BUILD:-$src/build-package}

# The version is the one the built CLI reports (project(VERSION) in CMakeLists.txt, through
# canzona_version.h), so that the package's name is what its programs and libraries say.
built_version() {
  "$build/canzona" --version | sed -n 's/^canzona \([0-9][0-9.]*\) .*/\1/p'
}
if [ "${1:-}" = "--print-version" ]; then
  v=$(built_version)
  [ -n "$v" ] || { echo "package: $build/canzona reports no version" >&2; exit 1; }
  echo "$v"
  exit 0
fi
outdir=${1:-$src}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
jobs=${CZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
limit_mib=60

for tool in cmake patchelf ldd readelf tar gzip ompi_info; do
  command -v "$tool" > /dev/null || { echo "package: $tool not found (bash tools/setup.sh)" >&2; exit 1; }
done

# ---- build and install ------------------------------------------------------------------------
echo "== configure ($build, Release, CZ_WERROR=${CZ_WERROR:-OFF}) =="
mkdir -p "$build"
# shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCZ_WERROR="${CZ_WERROR:-OFF}" \
  -DCZ_WITH_CUDA="${CZ_WITH_CUDA:-ON}" -DCMAKE_INSTALL_LIBDIR=lib \
  -DCMAKE_INSTALL_RPATH='$ORIGIN/../lib' > "$build/package-configure.log" 2>&1 ||
  { cat "$build/package-configure.log"; exit 1; }
grep -E '^-- canzona:' "$build/package-configure.log" || true
echo "== build (-j $jobs) =="
cmake --build "$build" -j "$jobs" > "$build/package-build.log" 2>&1 ||
  { grep -E 'error:|warning:|\*\*\*' "$build/package-build.log" || tail -50 "$build/package-build.log"; exit 1; }
version=$(built_version)
[ -n "$version" ] || { echo "package: $build/canzona reports no version" >&2; exit 1; }
name=canzona-$version-linux-$(uname -m)
stage=$build/stage
pkg=$stage/$name
rm -rf "$stage"
mkdir -p "$stage"
cmake --install "$build" --prefix "$pkg" --strip > "$build/package-install.log"
cmake --install "$build" --prefix "$pkg" --strip --component gpu-check >> "$build/package-install.log"

# ---- our data -----------------------------------------------------------------------------------
# Tracked files only (no caches or local outputs), from a clone; a plain copy otherwise.
copy_tree() { # copy_tree <folder relative to src> <destination>
  mkdir -p "$2"
  if git -C "$src" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    (cd "$src/$1" && git ls-files -z . | tar --null -T - -cf -) | tar -C "$2" -xf -
  else
    (cd "$src/$1" && tar --exclude=__pycache__ -cf - .) | tar -C "$2" -xf -
  fi
}
share=$pkg/share/canzona
copy_tree plans "$share/plans"
copy_tree python "$share/python"
copy_tree tests/data "$share/tests/data"

# ---- Open MPI and PMIx ----------------------------------------------------------------------------
# The Open MPI the build linked (ompi_info on PATH must be the same one).
ompi_paths=$(ompi_info --parsable --path all)
ompi_path() { sed -n "/^path:$1:/{s///p;q}" <<< "$ompi_paths"; }
ompi_bindir=$(ompi_path bindir)
ompi_pkglibdir=$(ompi_path pkglibdir)
ompi_pkgdatadir=$(ompi_path pkgdatadir)
if [ -x "$pkg/bin/canzona-bench" ]; then
  ldd "$pkg/bin/canzona-bench" > "$build/ldd.txt"
  linked=$(sed -n 's/^\s*libmpi\.so\.[0-9]* => \(\S*\).*/\1/p' "$build/ldd.txt")
  ldd "$ompi_bindir/ompi_info" > "$build/ldd.txt"
  found=$(sed -n 's/^\s*libmpi\.so\.[0-9]* => \(\S*\).*/\1/p' "$build/ldd.txt")
  if [ "$(readlink -f "$linked")" != "$(readlink -f "$found")" ]; then
    echo "package: canzona-bench links $linked but ompi_info uses $found" >&2
    exit 1
  fi
fi
mkdir -p "$pkg/libexec/openmpi" "$pkg/lib/openmpi" "$pkg/etc/openmpi" "$pkg/share"
for exe in orterun orted ompi_info; do
  cp -L "$ompi_bindir/$exe" "$pkg/libexec/openmpi/$exe"
done
# Plugins: all but those for fabrics (UCX, libfabric, verbs, PSM): their libraries are large,
# and a single-node run uses shared memory (the wrapper selects ob1 and self,vader).
fabric='lib(ucp|uct|ucs|ucm|fabric|ibverbs|rdmacm|psm_infinipath|psm2|infinipath|efa|mlx[0-9])\.so'
skipped=()
for so in "$ompi_pkglibdir"/mca_*.so; do
  ldd "$so" > "$build/ldd.txt" # (grep -q on a pipe could fail ldd with SIGPIPE)
  if grep -Eq "$fabric" "$build/ldd.txt"; then
    skipped+=("$(basename "$so" .so)")
  else
    cp -L "$so" "$pkg/lib/openmpi/"
  fi
done
echo "Open MPI plugins: $(find "$pkg/lib/openmpi" -name 'mca_*.so' | wc -l) bundled; left out (fabrics): ${skipped[*]:-none}"
cp -rL "$ompi_pkgdatadir" "$pkg/share/openmpi"
cat > "$pkg/etc/openmpi/openmpi-mca-params.conf" <<'EOF'
# Open MPI's system parameters in canzona's relocatable package (bin/mpirun points
# OPAL_SYSCONFDIR here). The transports are chosen in libexec/canzona/mpi-env.sh, where the
# caller's OMPI_MCA_* environment can override them.
btl_base_warn_component_unused = 0
EOF
: > "$pkg/etc/openmpi/openmpi-default-hostfile"

# PMIx (Open MPI's pmix plugin loads libpmix): its plugins, help texts and configuration.
pmix_lib=$(for so in "$pkg"/lib/openmpi/mca_pmix_*.so; do ldd "$so"; done > "$build/ldd.txt"
  sed -n '/^\s*libpmix\.so\.[0-9]* => \(\/\S*\).*/{s//\1/p;q}' "$build/ldd.txt")
if [ -n "$pmix_lib" ]; then
  pmix_libdir=$(dirname "$(readlink -f "$pmix_lib")")
  pmix_prefix=$(dirname "$pmix_libdir")
  mkdir -p "$pkg/lib/pmix" "$pkg/etc/pmix"
  if [ -d "$pmix_libdir/pmix" ]; then cp -L "$pmix_libdir"/pmix/*.so "$pkg/lib/pmix/"; fi
  if [ -d "$pmix_prefix/share/pmix" ]; then cp -rL "$pmix_prefix/share/pmix" "$pkg/share/pmix"; fi
  printf '%s\n' "# PMIx's system parameters in canzona's relocatable package (PMIX_SYSCONFDIR)." \
    > "$pkg/etc/pmix/pmix-mca-params.conf"
fi

# ---- the closure of every ELF file ------------------------------------------------------------------
is_elf() { [ -f "$1" ] && [ ! -L "$1" ] && [ "$(head -c 4 "$1" | tr -d '\0')" = $'\x7fELF' ]; }
glibc='^(ld-linux[-a-z0-9_.]*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libBrokenLocale|libthread_db|libc_malloc_debug|libmemusage|libpcprofile|libSegFault|libnss_[a-z0-9_]+)\.so(\.[0-9.]+)?$'
runtime='^(libgcc_s\.so\.1|libstdc\+\+\.so\.6)$'
nvidia='^lib(cuda|cudart|cublas|cublasLt|cusolver|cusolverMg|cusparse|cufft|curand|nvJitLink|nvrtc|nccl|nvidia-[a-z-]+|nvToolsExt|cupti)\.so'
system_lib() { [[ $1 =~ $glibc || $1 =~ $runtime || $1 =~ $nvidia || $1 == linux-vdso.so.1 ]]; }
elf_files() {
  find "$pkg" -type f -print0 | while IFS= read -r -d '' f; do if is_elf "$f"; then echo "$f"; fi; done
}

# Each file's closure as the host's loader resolves it (ldd is transitive); what is not there yet
# is copied to lib/ under the name the loader asks for (copies join the queue).
mapfile -t queue < <(elf_files)
i=0
while [ "$i" -lt "${#queue[@]}" ]; do
  f=${queue[$i]}
  i=$((i + 1))
  while read -r soname path; do
    system_lib "$soname" && continue
    [ -e "$pkg/lib/$soname" ] && continue
    if [ "$path" = "not" ]; then
      echo "package: ${f#"$pkg"/} needs $soname, which this machine does not have" >&2
      exit 1
    fi
    cp -L "$path" "$pkg/lib/$soname"
    chmod u+w "$pkg/lib/$soname"
    queue+=("$pkg/lib/$soname")
  done < <(ldd "$f" 2> /dev/null | sed -n 's/^\s*\(\S*\) => \(\S*\).*/\1 \2/p')
done

# hwloc looks for its plugins in lib/hwloc only (mpi-env.sh): none are needed, and a system's
# plugins of another hwloc must not be loaded.
mkdir -p "$pkg/lib/hwloc"

# ---- run paths ------------------------------------------------------------------------------------
# Every ELF file that needs a library the package carries, or that came with a run path (Debian's
# Open MPI has absolute ones), gets $ORIGIN/<path to lib>; the rest stay as they were built.
nvidia_users=()
while IFS= read -r f; do
  readelf -d "$f" > "$build/dyn.txt" 2> /dev/null || continue
  needs_ours=no
  while read -r soname; do
    if [[ $soname =~ $nvidia ]]; then
      case ${f#"$pkg"/} in lib/libcanzona-cuda*.so*) ;; *) nvidia_users+=("${f#"$pkg"/} needs $soname") ;; esac
    elif [ -e "$pkg/lib/$soname" ]; then
      needs_ours=yes
    fi
  done < <(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' "$build/dyn.txt")
  if [ "$needs_ours" = yes ] || grep -Eq '\((RUNPATH|RPATH)\)' "$build/dyn.txt"; then
    rel=$(realpath --relative-to="$(dirname "$f")" "$pkg/lib")
    # shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader
    if [ "$rel" = . ]; then rp='$ORIGIN'; else rp="\$ORIGIN/$rel"; fi
    patchelf --set-rpath "$rp" "$f"
  fi
done < <(elf_files)
if [ ${#nvidia_users[@]} -gt 0 ]; then
  echo "package: the package carries no NVIDIA library; only the CUDA backend's dlopen()ed plugin" \
    "(lib/libcanzona-cuda*.so) may need one, but:" >&2
  printf '  %s\n' "${nvidia_users[@]}" >&2
  echo "  (CZ_WITH_CUDA=OFF builds a package without the CUDA backend)" >&2
  exit 1
fi

# ---- launcher and environment --------------------------------------------------------------------
mkdir -p "$pkg/libexec/canzona"
cat > "$pkg/libexec/canzona/mpi-env.sh" <<'EOF'
# Sourced with CANZONA_ROOT set to the package's top folder (bin/mpirun does this): Open MPI and
# PMIx find their plugins, configuration and help texts in the package wherever it is unpacked,
# not at the paths of the Debian build they came from. The ranks mpirun starts inherit it; a
# program of the package that initializes MPI on its own (a singleton) needs it too.
# Single node unless the caller's environment says otherwise: ranks started by mpirun itself (plm
# isolated: no ssh, which a container may not have) talking through shared memory (pml ob1, btl
# self,vader; the package carries no fabric plugins, tcp aside). Across nodes: OMPI_MCA_plm=rsh
# (or slurm) and OMPI_MCA_btl=self,vader,tcp, with the package at the same path on every node.
export CANZONA_ROOT
export OPAL_PREFIX="$CANZONA_ROOT" OPAL_EXEC_PREFIX="$CANZONA_ROOT"
export OPAL_BINDIR="$CANZONA_ROOT/libexec/openmpi" OPAL_LIBDIR="$CANZONA_ROOT/lib"
export OPAL_PKGLIBDIR="$CANZONA_ROOT/lib/openmpi" OPAL_SYSCONFDIR="$CANZONA_ROOT/etc/openmpi"
export OPAL_DATAROOTDIR="$CANZONA_ROOT/share" OPAL_DATADIR="$CANZONA_ROOT/share"
export OPAL_PKGDATADIR="$CANZONA_ROOT/share/openmpi"
export PMIX_PREFIX="$CANZONA_ROOT" PMIX_EXEC_PREFIX="$CANZONA_ROOT"
export PMIX_LIBDIR="$CANZONA_ROOT/lib" PMIX_PKGLIBDIR="$CANZONA_ROOT/lib/pmix"
export PMIX_SYSCONFDIR="$CANZONA_ROOT/etc/pmix" PMIX_DATADIR="$CANZONA_ROOT/share"
export PMIX_PKGDATADIR="$CANZONA_ROOT/share/pmix"
export PMIX_MCA_mca_base_component_path="$CANZONA_ROOT/lib/pmix"
export HWLOC_PLUGINS_PATH="$CANZONA_ROOT/lib/hwloc"
export OMPI_MCA_plm="${OMPI_MCA_plm:-isolated}"
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}" OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
EOF
cat > "$pkg/bin/mpirun" <<'EOF'
#!/bin/sh
# Open MPI's mpirun from canzona's relocatable package: sets the package's Open MPI and PMIx
# paths (libexec/canzona/mpi-env.sh) and runs the bundled launcher.
self=$(readlink -f "$0" 2>/dev/null || echo "$0")
CANZONA_ROOT=$(cd "$(dirname "$self")/.." && pwd -P)
# shellcheck source=/dev/null
. "$CANZONA_ROOT/libexec/canzona/mpi-env.sh"
# LD_LIBRARY_PATH comes before the package's run paths: another Open MPI named there would be
# loaded instead of the package's.
old_ifs=$IFS
IFS=:
for d in ${LD_LIBRARY_PATH:-}; do
  if [ -n "$d" ] && [ -e "$d/libmpi.so.40" ] && [ "$d" != "$CANZONA_ROOT/lib" ]; then
    echo "mpirun: warning: LD_LIBRARY_PATH names another Open MPI ($d); unset it to use the package's" >&2
  fi
done
IFS=$old_ifs
exec "$CANZONA_ROOT/libexec/openmpi/orterun" "$@"
EOF
chmod 755 "$pkg/bin/mpirun"
ln -s mpirun "$pkg/bin/mpiexec"

# ---- report and pack --------------------------------------------------------------------------------
glibc_max=$(elf_files | while IFS= read -r f; do readelf -V -W "$f" 2> /dev/null; done |
  grep -o 'Name: GLIBC_[0-9.]*' | sed 's/Name: GLIBC_//' | sort -t. -k1,1n -k2,2n -u | sed -n '$p')
gpu_note=
if compgen -G "$pkg/lib/libcanzona-cuda*.so*" > /dev/null; then
  gpu_note="; for the GPU path the NVIDIA driver, cuBLAS, cuSOLVER and NCCL"
fi
echo "package needs from the machine: glibc >= $glibc_max and libgcc_s.so.1$gpu_note"
out=$outdir/$name.tar.gz
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2> /dev/null || date +%s)}
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$name" |
  gzip -9n > "$out.tmp"
mv "$out.tmp" "$out"
size=$(stat -c %s "$out")
echo "largest files (unpacked):"
find "$pkg" -type f -printf '%s %P\n' | sort -rn > "$build/sizes.txt"
sed 10q "$build/sizes.txt" |
  while read -r bytes path; do printf '  %7s  %s\n' "$(numfmt --to=iec-i --suffix=B "$bytes")" "$path"; done
printf 'package: %s (%s packed, %s unpacked, %d files)\n' "$out" \
  "$(numfmt --to=iec-i --suffix=B "$size")" "$(du -sh "$pkg" | cut -f1)" "$(find "$pkg" -type f | wc -l)"
if [ "$size" -ge $((limit_mib * 1024 * 1024)) ]; then
  echo "package: over the $limit_mib MiB limit" >&2
  exit 1
fi
