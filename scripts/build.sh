#!/usr/bin/env bash
# Configures (once) and builds dsec into build/ (all targets, or the ones
# given as arguments). Uses ccache when present.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/build.ninja ]]; then
  meson setup build --buildtype=debugoptimized
fi
# Two cores here: more jobs only add memory pressure on the CAF translation units.
ninja -C build -j "${DSEC_BUILD_JOBS:-$(nproc)}" "$@"
