#!/usr/bin/env bash
# The second of the README's two commands (and what CI runs): install what is
# missing, build, prepare the test layer store, run every test: unit, actor,
# gossip, privileged integration and security (Catch2 via meson test), then
# end-to-end and security (pytest against real nodes; test/security is the
# one home of the security tests, red team included).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
bash scripts/build.sh

export DSEC_BIN=$PWD/build/cmd/dsec
export DSEC_TEST_STORE=${DSEC_TEST_STORE:-/var/lib/dsec-test/store}
echo "== test layer store $DSEC_TEST_STORE"
# --e2b: also base/e2b@1, E2B's `base` template (a debootstrap of a few minutes, once).
"$DSEC_BIN" layer defaults --e2b --store "$DSEC_TEST_STORE"

echo "== guest kernel for the microVM and VM backends (cached after the first run)"
bash scripts/guest_kernel.sh "${DSEC_GUEST_DIR:-/var/lib/dsec/guest}"

echo "== unit, actor, gossip, integration and security (C++) tests"
meson test -C build --print-errorlogs --num-processes 1

echo "== end-to-end tests"
/usr/bin/python3 -m pytest test/e2e -q -p no:cacheprovider

echo "== security tests: red team, isolation, seccomp, protected paths, network policy"
/usr/bin/python3 -m pytest test/security -q -p no:cacheprovider

echo "== fault harness: 5 nodes in network namespaces, a seeded run of every fault kind"
/usr/bin/python3 -m pytest test/cluster -q -p no:cacheprovider
