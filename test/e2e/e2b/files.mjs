// Files through the unmodified SDK: write, read as text and bytes, list,
// exists, makeDir, rename, remove, getInfo, and the not-found errors.
import { Sandbox, NotFoundError, assert, template, report, rejects } from './lib.mjs';

const sbx = await Sandbox.create(template);
try {
  const info = await sbx.files.write('/work/a.txt', 'hello e2b');
  assert.equal(info.path, '/work/a.txt');
  assert.equal(await sbx.files.read('/work/a.txt'), 'hello e2b');
  const bytes = new Uint8Array(256).map((_, i) => i);
  await sbx.files.write('/work/bin.dat', bytes);
  const back = await sbx.files.read('/work/bin.dat', { format: 'bytes' });
  assert.deepEqual(Array.from(back), Array.from(bytes));
  await sbx.files.write([{ path: '/work/m1.txt', data: 'one' }, { path: '/work/m2.txt', data: 'two' }]);
  assert.equal((await sbx.commands.run('cat /work/m1.txt /work/m2.txt')).stdout, 'onetwo');

  const names = (await sbx.files.list('/work')).map((e) => `${e.name}:${e.type}`).sort();
  assert.deepEqual(names, ['a.txt:file', 'bin.dat:file', 'm1.txt:file', 'm2.txt:file']);
  const st = await sbx.files.getInfo('/work/bin.dat');
  assert.equal(st.size, 256);
  assert.equal(st.type, 'file');
  assert.ok(st.modifiedTime instanceof Date);

  assert.equal(await sbx.files.exists('/work/a.txt'), true);
  assert.equal(await sbx.files.exists('/work/none'), false);
  assert.equal(await sbx.files.makeDir('/work/d/e'), true);
  assert.equal(await sbx.files.makeDir('/work/d/e'), false, 'an existing dir');
  const deep = (await sbx.files.list('/work', { depth: 3 })).map((e) => e.path);
  assert.ok(deep.includes('/work/d/e'), JSON.stringify(deep));

  const moved = await sbx.files.rename('/work/a.txt', '/work/d/e/b.txt');
  assert.equal(moved.path, '/work/d/e/b.txt');
  assert.equal((await sbx.commands.run('cat /work/d/e/b.txt')).stdout, 'hello e2b');
  await sbx.files.remove('/work/d');
  assert.equal(await sbx.files.exists('/work/d'), false);

  await rejects(() => sbx.files.read('/work/none'), NotFoundError, 'read missing');
  await rejects(() => sbx.files.getInfo('/work/none'), NotFoundError, 'stat missing');
  await rejects(() => sbx.files.list('/work/none'), NotFoundError, 'list missing');
  await sbx.files.remove('/work/none'); // as E2B's envd (os.RemoveAll): no error

  // watchDir: a file made, changed and removed under the watched directory.
  const events = [];
  const watch = await sbx.files.watchDir('/work', (e) => events.push(`${e.type}:${e.name}`));
  await sbx.files.write('/work/w.txt', 'x');
  const until = async (what) => {
    for (let i = 0; i < 100 && !events.includes(what); i++)
      await new Promise((r) => setTimeout(r, 100));
    assert.ok(events.includes(what), `no ${what} event in ${JSON.stringify(events)}`);
  };
  await until('create:w.txt');
  await sbx.commands.run('echo more >> /work/w.txt');
  await until('write:w.txt');
  await sbx.files.remove('/work/w.txt');
  await until('remove:w.txt');
  await watch.stop();

  // A symlink the agent plants does not lead the file API out of the sandbox.
  await sbx.commands.run('ln -s / /work/root && ln -s /etc/hostname /work/host');
  const escaped = process.env.HOST_ONLY_FILE.replace(/^\//, '');
  await rejects(() => sbx.files.read('/work/root/' + escaped), NotFoundError, 'read through symlink');
  await rejects(() => sbx.files.read('/' + escaped), NotFoundError, 'read a host path');
  report({ id: sbx.sandboxId, ok: true });
} finally {
  await sbx.kill();
}
