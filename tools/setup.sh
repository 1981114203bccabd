#!/usr/bin/env bash
# Installs the Debian packages canzona needs to build and test. Safe to run repeatedly.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libjansson-dev libglpk-dev check libsubunit-dev
      libopenmpi-dev openmpi-bin libopenblas-dev liblapacke-dev libxml2-utils python3 python3-numpy
      python3-mpi4py python3-torch patchelf
      clang libclang-rt-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
