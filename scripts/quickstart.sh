#!/usr/bin/env bash
# The first of the README's two commands: install what is missing, build,
# build the default layers, start a node in the background and show a sandbox
# working through the CLI. The node keeps running afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=${DSEC_STATE_DIR:-/var/lib/dsec}
GUEST=${DSEC_GUEST_DIR:-/var/lib/dsec/guest}
REST=${DSEC_REST:-127.0.0.1:7070}
LISTEN=${DSEC_LISTEN:-127.0.0.1:7700}

bash scripts/deps.sh
# The node, its init and the Python module; the tests are built by scripts/test.sh.
bash scripts/build.sh cmd/dsec backends/dsec-init \
  "bindings/python/dsec/_native.$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX")[1:])')"
DSEC=$PWD/build/cmd/dsec

echo "== default layers (the first run debootstraps base/python@3.11: a few minutes)"
"$DSEC" layer defaults --state-dir "$STATE"
"$DSEC" layer ls --state-dir "$STATE"

echo "== guest kernel for the microvm and vm backends (Debian's linux-image, cached after the first run)"
bash scripts/guest_kernel.sh "$GUEST"

if curl -fsS "http://$REST/healthz" >/dev/null 2>&1; then
  echo "== a node already answers on $REST; using it"
else
  echo "== starting dsec node (log: $STATE/node.log)"
  DSEC_GUEST_DIR=$GUEST setsid "$DSEC" node --state-dir "$STATE" --rest "$REST" --listen "$LISTEN" \
    >"$STATE/node.log" 2>&1 < /dev/null &
  echo $! > "$STATE/node.pid"
  for _ in $(seq 1 100); do
    curl -fsS "http://$REST/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
curl -fsS "http://$REST/healthz"; echo

echo "== a sandbox at work"
export DSEC_REST=$REST
ID=$("$DSEC" create --layer base/python@3.11 --memory-mb 256 --label demo=quickstart)
echo "created $ID"
"$DSEC" exec "$ID" -- python3 -c 'import platform; print("hello from", platform.node(), "python", platform.python_version())'
echo 'print(6 * 7)' | "$DSEC" cp - "$ID:/work/answer.py"
"$DSEC" exec "$ID" 'cd /work && python3 answer.py'
"$DSEC" exec "$ID" 'echo "pid 1 is $(cat /proc/1/comm); processes: $(ls /proc | grep -c "^[0-9]")"'
"$DSEC" ls
"$DSEC" rm "$ID"

echo "== the same from Python on all four backends (import dsec, native protocol on $LISTEN)"
PYTHONPATH=$PWD/build/bindings/python DSEC_ADDR=$LISTEN /usr/bin/python3 - <<'PY'
import time

import dsec

c = dsec.Client()
# One SDK, four backends, switched by one parameter. The first microvm and vm
# create of a node boots a template guest (seconds under TCG); later ones
# restore a clone of it.
for backend in ("container", "microvm", "vm"):
    t0 = time.monotonic()
    with c.create(layers=["base/python@3.11"], backend=backend, memory_mb=256,
                  labels={"demo": "sdk"}) as sb:
        made = time.monotonic() - t0
        sb.write_file("/work/answer.py", "print(6 * 7)")
        r = sb.exec("cd /work && python3 answer.py", timeout_s=60)
        print(f"{backend:9} {sb.id}: exit {r.exit_code}, stdout {r.stdout.strip()!r}, "
              f"create {made:.2f} s, exec {r.duration_ms:.1f} ms")
        assert r.exit_code == 0 and r.stdout.strip() == "42", r
# FnCall: one short program from the node's warm pool (the first call waits
# for the pool to start).
for i in range(3):
    r = c.fncall("python", "print(6 * 7)")
    print(f"fncall    exit {r.exit_code}, stdout {r.stdout.strip()!r}, {r.duration_ms:.1f} ms")
    assert r.exit_code == 0 and r.stdout.strip() == "42", r
PY
cat <<MSG

dsec node is running (REST $REST, native $LISTEN, state $STATE).
Try:   $DSEC create --layer base/busybox@1
       PYTHONPATH=$PWD/build/bindings/python python3 examples/rollout.py --addr $LISTEN
       curl -s http://$REST/v1/sandboxes
Stop:  kill \$(cat $STATE/node.pid)
MSG
