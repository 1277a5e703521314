#!/usr/bin/env bash
# Installs the oracle's npm dependencies and builds build/oracle.mjs from the
# seed document named by SEED_DURABILITY (the web page dump that holds
# durability.ts and scheduler.ts).
#
#   SEED_DURABILITY=path/to/002_038c26499a497a3d.txt tests/durability_oracle/node/setup.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${SEED_DURABILITY:?set SEED_DURABILITY to the seed file holding durability.ts and scheduler.ts}"
if [ ! -f "$SEED_DURABILITY" ]; then
  echo "SEED_DURABILITY: no such file: $SEED_DURABILITY" >&2
  exit 2
fi
seed="$(cd "$(dirname "$SEED_DURABILITY")" && pwd)/$(basename "$SEED_DURABILITY")"
cd "$here"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
node build.mjs "$seed"
echo 'ready: python -m tests.durability_oracle.selfcheck; python -m tests.durability_oracle.differential'
