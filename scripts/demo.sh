#!/bin/sh
# demo.sh — set up, build, and run the main job: a 4-worker data-parallel
# training run (examples/train_mlp) launched by hvdrun on a private,
# embedded hvd-coordinatord. Arguments go to train_mlp (e.g. --epochs 20).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh" --build
"$top/scripts/build.sh"
exec "$top/build/tools/hvdrun" -np 4 "$top/build/examples/train_mlp" "$@"
