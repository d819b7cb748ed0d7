// E2B's user and home (issue 27, A1) with template `base` (base/e2b@1):
// commands run as `user` in /home/user, relative paths start there, files
// written through the SDK belong to the user, an explicit `user` wins, and
// the template has git (driven by the SDK's own git helpers on a local
// repository), python, python3 and pip.
import { Sandbox, assert, template, report } from './lib.mjs';

const sbx = await Sandbox.create(template, { metadata: { suite: 'user' } });
const run = async (cmd, opts) => (await sbx.commands.run(cmd, opts)).stdout.trim();
try {
  assert.equal(await run('whoami'), 'user');
  assert.equal(await run('pwd'), '/home/user');
  assert.equal(await run('echo $HOME'), '/home/user');
  // E2B's base gives `user` passwordless sudo (sudo.mjs has the rest).
  assert.equal(await run('sudo whoami'), 'root');

  // Relative paths: the file API and the shell agree on /home/user.
  const w = await sbx.files.write('test_write.txt', 'hello');
  assert.equal(w.path, '/home/user/test_write.txt');
  assert.equal(await sbx.files.read('test_write.txt'), 'hello');
  assert.equal(await run('cat test_write.txt'), 'hello');
  assert.equal(await run('stat -c %U:%G /home/user/test_write.txt'), 'user:user');
  // New parent directories belong to the user too, so it can write in them.
  await sbx.files.write('deep/er/f.txt', 'x');
  assert.equal(await run('stat -c %U /home/user/deep /home/user/deep/er /home/user/deep/er/f.txt'),
               'user\nuser\nuser');
  assert.equal(await run('echo more >> deep/er/f.txt && cat deep/er/f.txt'), 'xmore');
  await sbx.files.write([{ path: 'm1.txt', data: 'one' }, { path: '/tmp/m2.txt', data: 'two' }]);
  assert.equal(await run('stat -c %U m1.txt /tmp/m2.txt'), 'user\nuser');
  // MakeDir: made by the user; false when it exists.
  assert.equal(await sbx.files.makeDir('made/sub'), true);
  assert.equal(await sbx.files.makeDir('made/sub'), false);
  assert.equal(await run('stat -c %U made made/sub'), 'user\nuser');
  const names = (await sbx.files.list('made')).map((e) => e.path);
  assert.deepEqual(names, ['/home/user/made/sub']);
  assert.equal((await sbx.files.getInfo('m1.txt')).owner, 'user');
  assert.equal(await sbx.files.exists('m1.txt'), true);
  // A relative cwd starts at home as well.
  assert.equal(await run('pwd', { cwd: 'made' }), '/home/user/made');

  // An explicit user wins: root in /root.
  assert.equal(await run('whoami', { user: 'root' }), 'root');
  assert.equal(await run('pwd', { user: 'root' }), '/root');
  const r = await sbx.files.write('r.txt', 'root', { user: 'root' });
  assert.equal(r.path, '/root/r.txt');
  assert.equal(await run('stat -c %U /root/r.txt', { user: 'root' }), 'root');
  assert.equal(await sbx.files.read('r.txt', { user: 'root' }), 'root');
  let refused = null;
  try {
    await sbx.commands.run('true', { user: 'nosuchuser' });
  } catch (e) {
    refused = e;
  }
  assert.ok(refused && /nosuchuser/.test(refused.message), `unknown user: ${refused?.message}`);

  // The template's tools, as E2B's base has them.
  assert.match(await run('python --version'), /^Python 3\./);
  assert.match(await run('python3 -c "import sys; print(sys.version_info[0])"'), /^3$/);
  assert.match(await run('pip --version'), /^pip /);
  assert.match(await run('curl --version | head -1'), /^curl /);
  assert.match(await run('wget --version | head -1'), /^GNU Wget/);

  // git through the SDK's helpers: init, add, commit, clone of a local repo.
  const src = '/home/user/src';
  await sbx.git.init(src, { initialBranch: 'main' });
  await sbx.files.write(`${src}/README.md`, 'hello\n');
  await sbx.git.add(src);
  await sbx.git.commit(src, 'Initial commit', { authorName: 'Sandbox Bot', authorEmail: 'bot@example.com' });
  assert.equal(await run(`git -C ${src} log -1 --pretty=%B`), 'Initial commit');
  assert.equal(await run(`git -C ${src} log -1 --pretty=%an`), 'Sandbox Bot');
  await sbx.git.clone(src, { path: '/home/user/copy' });
  assert.equal(await sbx.files.read('copy/README.md'), 'hello\n');
  assert.equal(await run('stat -c %U copy/.git'), 'user');
  report({ ok: true, id: sbx.sandboxId });
} finally {
  await sbx.kill();
}
