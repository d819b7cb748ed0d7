// Pushed output and events through the unmodified SDK: onStdout sees each
// line soon after the command prints it (no 200 ms poll behind it), two
// handles on one command each get its output once (a late one first gets
// what it missed), and watchDir reports create, write, chmod, rename and
// remove from inotify, recursively when asked.
import { Sandbox, assert, template, report } from './lib.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(events, what, ms = 10000) {
  for (let t = 0; t < ms && !events.includes(what); t += 50)
    await sleep(50);
  assert.ok(events.includes(what), `no ${what} event in ${JSON.stringify(events)}`);
}

const sbx = await Sandbox.create(template);
try {
  // Each line arrives on its own, well before the command ends.
  const seen = [];
  const t0 = Date.now();
  const r = await sbx.commands.run('for i in 1 2 3 4; do echo $i; sleep 0.5; done', {
    onStdout: (d) => seen.push([Date.now() - t0, d]),
  });
  assert.equal(r.stdout, '1\n2\n3\n4\n');
  assert.equal(seen.map(([, d]) => d).join(''), '1\n2\n3\n4\n');
  assert.ok(seen.length >= 3, `output should stream: ${JSON.stringify(seen)}`);
  const firstAt = seen[0][0];
  const lastAt = seen[seen.length - 1][0];
  assert.ok(lastAt - firstAt > 1000, `lines should arrive apart: ${JSON.stringify(seen)}`);

  // Two handles: the one that started it and a late Connect; each gets all
  // of the output once.
  const a = [];
  const b = [];
  const h = await sbx.commands.run('echo first; sleep 1; for i in 1 2 3; do echo n$i; done; sleep 0.3', {
    background: true, onStdout: (d) => a.push(d),
  });
  for (let i = 0; i < 100 && !a.join('').includes('first'); i++)
    await sleep(50);
  const late = await sbx.commands.connect(h.pid, { onStdout: (d) => b.push(d) });
  const [ra, rb] = await Promise.all([h.wait(), late.wait()]);
  assert.equal(a.join(''), 'first\nn1\nn2\nn3\n');
  assert.equal(b.join(''), 'first\nn1\nn2\nn3\n', 'the late handle first gets what it missed');
  assert.equal(ra.stdout, 'first\nn1\nn2\nn3\n');
  assert.equal(rb.stdout, 'first\nn1\nn2\nn3\n');

  // watchDir: inotify events with E2B's names.
  await sbx.commands.run('mkdir -p /work/w');
  const events = [];
  const watch = await sbx.files.watchDir('/work/w', (e) => events.push(`${e.type}:${e.name}`));
  await sbx.files.write('/work/w/a.txt', 'x');
  await until(events, 'create:a.txt');
  await sbx.commands.run('echo more >> /work/w/a.txt');
  await until(events, 'write:a.txt');
  await sbx.commands.run('chmod 600 /work/w/a.txt');
  await until(events, 'chmod:a.txt');
  await sbx.commands.run('mv /work/w/a.txt /work/w/b.txt');
  await until(events, 'rename:a.txt');
  await until(events, 'create:b.txt');
  await sbx.commands.run('rm /work/w/b.txt');
  await until(events, 'remove:b.txt');
  // Not recursive: a file in a new subdirectory is not reported.
  await sbx.commands.run('mkdir /work/w/sub && echo x > /work/w/sub/deep.txt');
  await until(events, 'create:sub');
  await sleep(300);
  assert.ok(!events.some((e) => e.includes('deep.txt')), JSON.stringify(events));
  await watch.stop();

  // Recursive: directories present and made later.
  const deep = [];
  const rw = await sbx.files.watchDir('/work/w', (e) => deep.push(`${e.type}:${e.name}`), { recursive: true });
  await sbx.commands.run('echo y > /work/w/sub/two.txt');
  await until(deep, 'create:sub/two.txt');
  await sbx.commands.run('mkdir -p /work/w/sub/new && sleep 0.2 && echo z > /work/w/sub/new/three.txt');
  await until(deep, 'create:sub/new');
  await until(deep, 'create:sub/new/three.txt');
  await rw.stop();

  report({ id: sbx.sandboxId, ok: true, first_line_ms: firstAt });
} finally {
  await sbx.kill();
}
