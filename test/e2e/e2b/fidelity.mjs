// Behaviours where dsec answers as E2B does (issue 27), each through the
// unmodified SDK; PART picks one: lifecycle, paused_calls, files_pause, foreign,
// connect, files, commands, killed.
import { Sandbox, CommandExitError, NotFoundError, assert, template, report, rejects } from './lib.mjs';

const part = process.env.PART;

if (part === 'lifecycle') {
  // lifecycle -> the create body's autoPause/autoResume -> GET's lifecycle.
  const plain = await Sandbox.create(template);
  assert.deepEqual((await plain.getInfo()).lifecycle, { onTimeout: 'kill', autoResume: false });
  const pausing = await Sandbox.create(template, { lifecycle: { onTimeout: 'pause' } });
  assert.deepEqual((await pausing.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false });
  const resuming = await Sandbox.create(template, { lifecycle: { onTimeout: 'pause', autoResume: true } });
  assert.deepEqual((await resuming.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true });
  // A filesystem-only pause at the timeout shows as a pause.
  const files = await Sandbox.create(template, {
    lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } });
  assert.deepEqual((await files.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false });
  await files.kill();
  // A paused sandbox without autoResume is not running until connect.
  await plain.files.write('/tmp/kept.txt', 'kept');
  assert.equal(await plain.isRunning(), true);
  assert.equal(await Sandbox.pause(plain.sandboxId), true);
  assert.equal(await plain.isRunning(), false, 'isRunning() after a pause');
  const back = await Sandbox.connect(plain.sandboxId);
  assert.equal(await back.isRunning(), true, 'isRunning() after connect');
  assert.equal(await back.files.read('/tmp/kept.txt'), 'kept');
  report({ ok: true, ids: [plain.sandboxId, pausing.sandboxId, resuming.sandboxId] });
} else if (part === 'paused_calls') {
  // Every envd call on a paused sandbox without autoResume fails (502) and
  // leaves it paused; connect resumes it.
  const sbx = await Sandbox.create(template);
  await Sandbox.pause(sbx.sandboxId);
  await rejects(() => sbx.commands.run('echo hi'), Error, 'a command on a paused sandbox');
  await rejects(() => sbx.files.read('/etc/hostname'), Error, 'a read on a paused sandbox');
  assert.equal((await sbx.getInfo()).state, 'paused');
  await Sandbox.connect(sbx.sandboxId);
  assert.equal((await sbx.commands.run('echo hi')).stdout, 'hi\n');
  await sbx.kill();
  report({ ok: true });
} else if (part === 'foreign') {
  // An id no dsec node made is not found: kill() is false, the rest throw NotFoundError.
  const id = 'i' + Date.now().toString(36) + 'foreign';
  assert.equal(await Sandbox.kill(id), false);
  await rejects(() => Sandbox.getInfo(id), NotFoundError, 'getInfo');
  await rejects(() => Sandbox.connect(id), NotFoundError, 'connect');
  await rejects(() => Sandbox.setTimeout(id, 10_000), NotFoundError, 'setTimeout');
  report({ ok: true });
} else if (part === 'files_pause') {
  // keepMemory false: the files stay, the processes go, connect boots it again.
  const bootId = async (s) => (await s.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim();
  const sbx = await Sandbox.create(template, { timeoutMs: 120_000 });
  await sbx.files.write('/tmp/fs-only.txt', 'kept');
  const before = await bootId(sbx);
  await sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 });
  assert.equal(await sbx.pause({ keepMemory: false }), true);
  assert.equal(await sbx.isRunning(), false, 'isRunning() after a pause without memory');
  assert.equal(await sbx.pause({ keepMemory: false }), false, 'already paused');
  const back = await sbx.connect();
  assert.equal(back.sandboxId, sbx.sandboxId);
  assert.equal(await back.isRunning(), true);
  assert.equal(await back.files.read('/tmp/fs-only.txt'), 'kept');
  assert.notEqual(await bootId(back), before, 'a new boot id');
  const procs = await back.commands.list();
  assert.ok(!procs.some((p) => [p.cmd, ...(p.args || [])].join(' ').includes('sleep 600')),
    `a process survived: ${JSON.stringify(procs)}`);
  // The timeout's pause without memory: paused at the end, connect boots it.
  const timed = await Sandbox.create(template, {
    timeoutMs: 3_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } });
  await timed.files.write('/tmp/t.txt', 't');
  const tBefore = await bootId(timed);
  const until = Date.now() + 20_000;
  while ((await timed.getInfo()).state !== 'paused' && Date.now() < until)
    await new Promise((r) => setTimeout(r, 250));
  assert.equal((await timed.getInfo()).state, 'paused');
  await timed.connect();
  assert.equal(await timed.files.read('/tmp/t.txt'), 't');
  assert.notEqual(await bootId(timed), tBefore);
  await sbx.kill();
  await timed.kill();
  report({ ok: true });
} else if (part === 'connect') {
  // connect only extends a sandbox's end, never shortens it.
  const sbx = await Sandbox.create(template, { timeoutMs: 300_000 });
  const before = (await sbx.getInfo()).endAt.getTime();
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 });
  const after = (await sbx.getInfo()).endAt.getTime();
  assert.equal(after, before, 'a shorter connect timeout leaves the end');
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 900_000 });
  const longer = (await sbx.getInfo()).endAt.getTime() - Date.now();
  assert.ok(longer > 890_000 && longer < 910_000, `end after a longer connect: ${longer} ms away`);
  await sbx.kill();
  report({ ok: true });
} else if (part === 'files') {
  const sbx = await Sandbox.create(template);
  // Remove of a missing path is no error (os.RemoveAll).
  await sbx.files.remove('/tmp/never-there');
  // ListDir with depth: lexical pre-order.
  await sbx.commands.run('mkdir -p /tmp/w/b/x /tmp/w/a && touch /tmp/w/c.txt /tmp/w/b/y.txt /tmp/w/B');
  const listed = (await sbx.files.list('/tmp/w', { depth: 2 })).map((e) => e.path);
  assert.deepEqual(listed, ['/tmp/w/B', '/tmp/w/a', '/tmp/w/b', '/tmp/w/b/x', '/tmp/w/b/y.txt',
    '/tmp/w/c.txt']);
  // A symlink's target is the resolved absolute path.
  await sbx.commands.run('ln -s ../w/b /tmp/w/rel && ln -s /tmp/w/./c.txt /tmp/w/abs');
  assert.equal((await sbx.files.getInfo('/tmp/w/rel')).symlinkTarget, '/tmp/w/b');
  assert.equal((await sbx.files.getInfo('/tmp/w/abs')).symlinkTarget, '/tmp/w/c.txt');
  // A new file written under a watch: CREATE, then WRITE.
  const seen = [];
  const handle = await sbx.files.watchDir('/tmp/w', (ev) => { if (ev.name === 'new.txt') seen.push(ev.type); });
  await sbx.files.write('/tmp/w/new.txt', 'fresh');
  for (let i = 0; i < 100 && !seen.includes('write'); i++)
    await new Promise((r) => setTimeout(r, 50));
  await handle.stop();
  assert.ok(seen.indexOf('create') >= 0 && seen.indexOf('create') < seen.indexOf('write'),
    `events of a new file: ${seen}`);
  await sbx.kill();
  report({ ok: true, listed, seen });
} else if (part === 'commands') {
  const sbx = await Sandbox.create(template);
  const e = await rejects(() => sbx.commands.run('echo out; exit 3'), CommandExitError, 'exit 3');
  assert.equal(e.exitCode, 3);
  assert.equal(e.error, 'exit status 3');
  assert.match(e.message, /exit status 3/);
  assert.equal(e.stdout, 'out\n');
  await sbx.kill();
  report({ ok: true, message: e.message });
} else if (part === 'killed') {
  // A sandbox killed while a command streams: the SDK reports it killed.
  const sbx = await Sandbox.create(template);
  const started = sbx.commands.run('echo started; sleep 60', {
    onStdout: () => { Sandbox.kill(sbx.sandboxId); } });
  const e = await rejects(() => started, Error, 'a command of a killed sandbox');
  assert.match(e.message, /killed/, e.message);
  report({ ok: true, error: e.constructor.name, message: e.message });
} else {
  throw new Error(`PART ${part}: unknown`);
}
