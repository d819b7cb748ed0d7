// The E2B side of bench/e2b_stdout_lag.py: how long after a command prints a
// line the SDK's onStdout sees it. The command (python, in the sandbox) prints
// its wall clock in ns with each line, every GAP_MS, N lines; onStdout stamps
// each line on arrival with the same clock (the sandbox shares the host's
// kernel clock). Prints one JSON line: lag_ms per line. Needs E2B_MODULE,
// E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY.
const { Sandbox } = await import(process.env.E2B_MODULE);
const n = Number(process.env.N || 100);
const gap = Number(process.env.GAP_MS || 50);
const template = process.env.E2B_TEMPLATE || 'base';
const nowMs = () => performance.timeOrigin + performance.now();

const sbx = await Sandbox.create(template);
const lag = [];
try {
  let buf = '';
  const code = `import sys, time\nfor i in range(${n}):\n    sys.stdout.write('%d\\n' % time.time_ns())\n    sys.stdout.flush()\n    time.sleep(${gap / 1000})\n`;
  await sbx.files.write('/tmp/lag.py', code);
  await sbx.commands.run('python3 /tmp/lag.py', {
    timeoutMs: 0,
    onStdout: (d) => {
      const at = nowMs();
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (/^\d+$/.test(line))
          lag.push(at - Number(BigInt(line) / 1000n) / 1000);
      }
    },
  });
} finally {
  await sbx.kill();
}
process.stdout.write(JSON.stringify({ lag_ms: lag }) + '\n');
