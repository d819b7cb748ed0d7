// Commands through the unmodified SDK: output, exit codes, streaming
// callbacks, cwd, envs (create-time and per command), timeouts, background
// commands with list and kill, connecting to a running command, and stdin.
import { Sandbox, CommandExitError, TimeoutError, NotFoundError, assert, template, report, rejects } from './lib.mjs';

const sbx = await Sandbox.create(template, { metadata: { suite: 'commands' }, envs: { AT_CREATE: 'yes' } });
try {
  let r = await sbx.commands.run('echo out; echo err >&2');
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'out\n');
  assert.equal(r.stderr, 'err\n');

  const e = await rejects(() => sbx.commands.run('echo partial; exit 3'), CommandExitError, 'exit 3');
  assert.equal(e.exitCode, 3);
  assert.equal(e.stdout, 'partial\n');

  const chunks = [];
  const errs = [];
  r = await sbx.commands.run('for i in 1 2 3; do echo $i; echo e$i >&2; sleep 0.3; done', {
    onStdout: (d) => chunks.push(d), onStderr: (d) => errs.push(d),
  });
  assert.equal(chunks.join(''), '1\n2\n3\n');
  assert.equal(errs.join(''), 'e1\ne2\ne3\n');
  assert.ok(chunks.length >= 2, `output should stream, got one chunk: ${JSON.stringify(chunks)}`);

  r = await sbx.commands.run('pwd; echo $FOO; echo $AT_CREATE', { cwd: '/tmp', envs: { FOO: 'bar baz' } });
  assert.equal(r.stdout, '/tmp\nbar baz\nyes\n');

  await rejects(() => sbx.commands.run('sleep 20', { timeoutMs: 1000 }), TimeoutError, 'timeoutMs');

  // Killed only once it printed: a kill that lands before the shell ran its
  // first statement (a few ms after the pid is known) leaves no output to check.
  let printed;
  const started = new Promise((resolve, reject) => {
    printed = resolve;
    setTimeout(() => reject(new Error('no "started" within 10 s')), 10000).unref();
  });
  const h = await sbx.commands.run('echo started; sleep 60', {
    background: true,
    onStdout: (data) => { if (data.includes('started')) printed(); },
  });
  await started;
  assert.ok(h.pid > 1);
  const listed = await sbx.commands.list();
  assert.ok(listed.some((p) => p.pid === h.pid), `list ${JSON.stringify(listed)} lacks ${h.pid}`);
  // A second client follows the same command by pid.
  const again = await sbx.commands.connect(h.pid);
  assert.equal(await sbx.commands.kill(h.pid), true);
  const killed = await rejects(() => h.wait(), CommandExitError, 'killed background');
  assert.notEqual(killed.exitCode, 0);
  assert.equal(killed.stdout, 'started\n');
  await rejects(() => again.wait(), CommandExitError, 'connected handle');
  assert.equal(await sbx.commands.kill(h.pid), false, 'a second kill finds nothing');
  const after = await sbx.commands.list();
  assert.ok(!after.some((p) => p.pid === h.pid));

  // stdin: kept open with stdin: true, fed with sendStdin, ended by closeStdin.
  const cat = await sbx.commands.run('cat; echo done', { background: true, stdin: true });
  await sbx.commands.sendStdin(cat.pid, 'line one\n');
  await sbx.commands.sendStdin(cat.pid, new Uint8Array([0x74, 0x77, 0x6f, 0x0a]));
  await sbx.commands.closeStdin(cat.pid);
  const fed = await cat.wait();
  assert.equal(fed.stdout, 'line one\ntwo\ndone\n');
  // Without stdin: true, stdin is closed at once (cat sees EOF).
  assert.equal((await sbx.commands.run('cat; echo eof')).stdout, 'eof\n');
  await rejects(() => sbx.commands.sendStdin(cat.pid, 'late'), NotFoundError, 'stdin after exit');

  // Output larger than one event, binary-safe.
  r = await sbx.commands.run('head -c 3000000 /dev/zero | tr "\\0" a; echo');
  assert.equal(r.stdout.length, 3000001);
  report({ id: sbx.sandboxId, ok: true });
} finally {
  await sbx.kill();
}
