#!/usr/bin/env bash
# Sets levelfield up, then sweeps the bundled noise suite (14 tasks x 3 agents x 3 policies x
# 3 repeats = 378 trials, 2-4 minutes on 2 cores), prints the report and writes
# noise-suite.html. Run it again to resume; remove runs/noise to start over. The agents: the
# oracle, a replay that always takes the memory-hungry way, and a population that draws one of
# each task's recorded behaviours per trial (trajectories/population.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/levelfield sweep examples/noise-suite \
  --agents oracle,replay:hungry,population --policies strict,3x,uncapped \
  --repeats 3 --concurrency 2 --out runs/noise --html noise-suite.html "$@"
