// envd 0.6 through the unmodified SDK (issue 27): the version a sandbox
// claims, file metadata (kept as user.e2b.* extended attributes: on write,
// getInfo, list and rename; an overwrite without metadata clears it; one set
// from inside the sandbox shows), gzip and octet-stream uploads, and watch
// events that carry their entry. PART picks one: version, metadata, upload,
// watch.
import { Sandbox, assert, template, report } from './lib.mjs';

const part = process.env.PART;
const sbx = await Sandbox.create(template);
try {
  if (part === 'version') {
    // The SDK gates envd features on this version; dsec claims what it implements.
    report({ ok: true, id: sbx.sandboxId, envdVersion: (await sbx.getInfo()).envdVersion });
  } else if (part === 'metadata') {
    const meta = { author: 'ada', purpose: 'upload' };
    const info = await sbx.files.write('notes.txt', 'hello', { metadata: meta });
    assert.equal(info.path, '/home/user/notes.txt');
    assert.deepEqual(info.metadata, meta, 'the write answers the metadata');
    assert.deepEqual((await sbx.files.getInfo('notes.txt')).metadata, meta, 'getInfo');
    // The same metadata on every file of one upload, also as octet-stream.
    const many = await sbx.files.writeFiles(
      [{ path: 'm/one.txt', data: '1' }, { path: 'm/two.txt', data: '2' }],
      { metadata: { batch: 'b7' }, useOctetStream: true });
    for (const f of many) {
      assert.deepEqual(f.metadata, { batch: 'b7' });
      assert.deepEqual((await sbx.files.getInfo(f.path)).metadata, { batch: 'b7' }, f.path);
    }
    const listed = await sbx.files.list('m');
    assert.deepEqual(listed.map((e) => e.metadata), [{ batch: 'b7' }, { batch: 'b7' }], 'list');
    const moved = await sbx.files.rename('notes.txt', 'renamed.txt');
    assert.deepEqual(moved.metadata, meta, 'rename keeps it');
    // An overwrite without metadata clears what was there.
    const plain = await sbx.files.write('renamed.txt', 'again');
    assert.equal(plain.metadata, undefined);
    assert.equal((await sbx.files.getInfo('renamed.txt')).metadata, undefined, 'cleared');
    // Set from inside the sandbox, by the user: surfaced the same way.
    const r = await sbx.commands.run(
      `python3 -c "import os; os.setxattr('/home/user/renamed.txt', 'user.e2b.stage', b'inside')"`);
    assert.equal(r.exitCode, 0);
    assert.deepEqual((await sbx.files.getInfo('renamed.txt')).metadata, { stage: 'inside' });
    // A file with no metadata has none; nor does a symlink.
    await sbx.commands.run('ln -s renamed.txt link.txt');
    assert.equal((await sbx.files.getInfo('link.txt')).metadata, undefined);
    report({ ok: true, id: sbx.sandboxId });
  } else if (part === 'upload') {
    // gzip implies octet-stream (envd 0.5.7): stored inflated.
    const text = 'gzip through envd '.repeat(200);
    const info = await sbx.files.write('z.txt', text, { gzip: true });
    assert.equal(info.path, '/home/user/z.txt');
    assert.equal(await sbx.files.read('z.txt'), text);
    assert.equal(await sbx.files.read('z.txt', { gzip: true }), text);
    assert.equal((await sbx.files.getInfo('z.txt')).size, text.length);
    const bytes = new Uint8Array(4096).map((_, i) => (i * 7) & 255);
    await sbx.files.write('raw.bin', bytes, { useOctetStream: true });
    assert.deepEqual(Array.from(await sbx.files.read('raw.bin', { format: 'bytes' })),
                     Array.from(bytes));
    // A streamed body (ReadableStream) goes as octet-stream too.
    const stream = new ReadableStream({
      start(c) { c.enqueue(new TextEncoder().encode('streamed ')); c.enqueue(new TextEncoder().encode('body')); c.close(); },
    });
    await sbx.files.write('s.txt', stream);
    assert.equal(await sbx.files.read('s.txt'), 'streamed body');
    const owner = (await sbx.files.getInfo('s.txt')).owner;
    assert.equal(owner, 'user', 'an octet-stream upload belongs to the user too');
    report({ ok: true, id: sbx.sandboxId });
  } else if (part === 'watch') {
    await sbx.files.makeDir('w');
    const events = [];
    const watch = await sbx.files.watchDir('w', (e) => events.push(e), { includeEntry: true });
    await sbx.files.write('w/a.txt', 'twelve bytes');
    const until = async (pred, what) => {
      for (let i = 0; i < 100 && !events.some(pred); i++)
        await new Promise((r) => setTimeout(r, 100));
      const e = events.find(pred);
      assert.ok(e, `no ${what} event in ${JSON.stringify(events)}`);
      return e;
    };
    const written = await until((e) => e.type === 'write' && e.name === 'a.txt' && e.entry?.size === 12,
                                'write of a.txt');
    assert.equal(written.entry.path, '/home/user/w/a.txt');
    assert.equal(written.entry.type, 'file');
    assert.equal(written.entry.owner, 'user');
    assert.ok(written.entry.modifiedTime instanceof Date);
    await sbx.files.remove('w/a.txt');
    const removed = await until((e) => e.type === 'remove' && e.name === 'a.txt', 'remove of a.txt');
    assert.equal(removed.entry, undefined, 'a removed path has no entry');
    await watch.stop();
    // Without includeEntry, events carry none; allowNetworkMounts is accepted.
    const plainEvents = [];
    const plain = await sbx.files.watchDir('w', (e) => plainEvents.push(e), { allowNetworkMounts: true });
    await sbx.files.write('w/b.txt', 'b');
    for (let i = 0; i < 100 && !plainEvents.some((e) => e.name === 'b.txt'); i++)
      await new Promise((r) => setTimeout(r, 100));
    assert.ok(plainEvents.length > 0, 'events without includeEntry');
    assert.ok(plainEvents.every((e) => e.entry === undefined), JSON.stringify(plainEvents));
    await plain.stop();
    report({ ok: true, id: sbx.sandboxId });
  } else {
    throw new Error(`unknown PART ${part}`);
  }
} finally {
  await sbx.kill();
}
