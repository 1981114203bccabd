#!/usr/bin/env bash
# The simulator against published measurements: recomputes every row of docs/SIMULATOR.md's
# table "Against published measurements" from the bundled inputs (tools/sim_validation.py) and
# fails when a prediction differs from the one the table prints, or when a row the table marks
# within its bound (published ratios 1.3x, absolute times 1.5x) is outside it.
set -u
: "${CZ:?CZ must point to the canzona binary}"
src=${CZ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }
python3 "$src/tools/sim_validation.py" --canzona "$CZ" --check "$src/docs/SIMULATOR.md"
