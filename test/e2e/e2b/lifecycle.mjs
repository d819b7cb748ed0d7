// The control plane through the unmodified SDK: create with metadata,
// getInfo, list with metadata and state filters and paging, setTimeout,
// pause and connect with processes and files kept, kill twice, and several
// sandboxes at once.
import { Sandbox, NotFoundError, assert, template, report } from './lib.mjs';

const tag = `t${Date.now()}`;
const sbx = await Sandbox.create(template, { metadata: { suite: tag, role: 'main' }, timeoutMs: 120_000 });
const info = await sbx.getInfo();
assert.equal(info.sandboxId, sbx.sandboxId);
assert.deepEqual(info.metadata, { suite: tag, role: 'main' });
assert.equal(info.state, 'running');
assert.equal(info.templateId, template);
const ttl = info.endAt.getTime() - info.startedAt.getTime();
assert.ok(Math.abs(ttl - 120_000) < 2000, `endAt - startedAt = ${ttl}`);

await sbx.setTimeout(600_000);
const later = (await sbx.getInfo()).endAt.getTime() - Date.now();
assert.ok(later > 590_000 && later < 610_000, `endAt after setTimeout is ${later} ms away`);

// Several at once.
const more = await Promise.all([1, 2, 3].map((i) =>
  Sandbox.create(template, { metadata: { suite: tag, role: `extra${i}` } })));
const outs = await Promise.all(more.map((s, i) => s.commands.run(`echo ${i}`)));
assert.deepEqual(outs.map((r) => r.stdout), ['0\n', '1\n', '2\n']);

const ids = async (query, limit) => {
  const p = Sandbox.list({ query, limit });
  const out = [];
  let pages = 0;
  while (p.hasNext) {
    out.push(...(await p.nextItems()).map((s) => s.sandboxId));
    pages++;
  }
  return { ids: out.sort(), pages };
};
const all = await ids({ metadata: { suite: tag } });
assert.deepEqual(all.ids, [sbx, ...more].map((s) => s.sandboxId).sort());
const paged = await ids({ metadata: { suite: tag } }, 2);
assert.deepEqual(paged.ids, all.ids);
assert.equal(paged.pages, 2);
assert.deepEqual((await ids({ metadata: { suite: tag, role: 'main' } })).ids, [sbx.sandboxId]);

// Pause keeps files and processes; connect resumes.
await sbx.files.write('/tmp/kept.txt', 'kept');
const bg = await sbx.commands.run('sleep 300', { background: true, timeoutMs: 0 });
assert.equal(await Sandbox.pause(sbx.sandboxId), true);
assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'already paused');
assert.equal((await sbx.getInfo()).state, 'paused');
assert.deepEqual((await ids({ metadata: { suite: tag }, state: ['paused'] })).ids, [sbx.sandboxId]);
assert.ok(!(await ids({ metadata: { suite: tag }, state: ['running'] })).ids.includes(sbx.sandboxId));
const same = await Sandbox.connect(sbx.sandboxId);
assert.equal((await same.getInfo()).state, 'running');
assert.equal(await same.files.read('/tmp/kept.txt'), 'kept');
assert.ok((await same.commands.list()).some((p) => p.pid === bg.pid), 'the background command survived');

for (const s of more)
  assert.equal(await s.kill(), true);
assert.equal(await sbx.kill(), true);
assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill');
let gone = false;
try { await Sandbox.getInfo(sbx.sandboxId); } catch (e) { gone = e instanceof NotFoundError || /not found/i.test(e.message); }
assert.ok(gone, 'getInfo after kill');
report({ ok: true, ids: all.ids });
