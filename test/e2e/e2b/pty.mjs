// Terminals through the unmodified SDK (issue 26 part 1): pty.create with
// onData, sendInput, resize (stty size follows), Ctrl-C reaching the
// foreground job, connect from a second handle (scrollback first), kill.
import { Sandbox, assert, template, report } from './lib.mjs';

const dec = new TextDecoder();

/// Output collected from onData callbacks, with a wait for a pattern.
function collector() {
  let text = '';
  const waiters = [];
  return {
    onData: (d) => {
      text += dec.decode(d);
      for (const w of waiters.splice(0)) w();
    },
    text: () => text,
    async until(pattern, ms = 20000) {
      const deadline = Date.now() + ms;
      while (!text.includes(pattern)) {
        const left = deadline - Date.now();
        assert.ok(left > 0, `no ${JSON.stringify(pattern)} within ${ms} ms; got ${JSON.stringify(text.slice(-600))}`);
        await new Promise((resolve) => { waiters.push(resolve); setTimeout(resolve, Math.min(left, 200)); });
      }
    },
  };
}

const enc = new TextEncoder();
const sbx = await Sandbox.create(template, { metadata: { suite: 'pty' } });
try {
  const out = collector();
  const t = await sbx.pty.create({ cols: 80, rows: 24, onData: out.onData, timeoutMs: 0 });
  assert.ok(t.pid > 1);
  await sbx.pty.sendInput(t.pid, enc.encode('stty size; echo e2b-$((6*7))\n'));
  await out.until('e2b-42');
  assert.ok(out.text().includes('24 80'), out.text());
  await sbx.pty.resize(t.pid, { cols: 100, rows: 40 });
  await sbx.pty.sendInput(t.pid, enc.encode('stty size\n'));
  await out.until('40 100');
  await sbx.pty.sendInput(t.pid, enc.encode('sleep 100\n'));
  await new Promise((r) => setTimeout(r, 500));
  await sbx.pty.sendInput(t.pid, enc.encode('\x03'));
  await sbx.pty.sendInput(t.pid, enc.encode('echo after-$((1+1))\n'));
  await out.until('after-2');

  const again = collector();
  const h2 = await sbx.pty.connect(t.pid, { onData: again.onData, timeoutMs: 0 });
  await again.until('e2b-42'); // the scrollback first
  await sbx.pty.sendInput(t.pid, enc.encode('echo both-$((2+2))\n'));
  await again.until('both-4');
  await out.until('both-4');

  assert.equal(await sbx.pty.kill(t.pid), true);
  const res = await t.wait().catch((e) => e);
  assert.notEqual(res.exitCode, 0);
  await h2.disconnect?.();
  report({ ok: true, pid: t.pid });
} finally {
  await sbx.kill();
}
