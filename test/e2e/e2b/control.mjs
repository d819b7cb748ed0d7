// E2B's control plane beyond create/kill (issue 27), each through the
// unmodified SDK; PART picks one: snapshots, fork, network, metrics, secure.
import { Sandbox, NotFoundError, assert, template, report, rejects, e2b } from './lib.mjs';

const part = process.env.PART;
const api = process.env.E2B_API_URL;
const key = process.env.E2B_API_KEY;

/// The native view of a sandbox (GET /v1/sandboxes/{id}): its denials.
async function native(id) {
  const r = await fetch(`${api}/v1/sandboxes/${encodeURIComponent(id)}`, { headers: { 'X-API-Key': key } });
  assert.equal(r.status, 200, `native GET ${id}`);
  return await r.json();
}

if (part === 'snapshots') {
  const sbx = await Sandbox.create(template);
  await sbx.files.write('/tmp/state.txt', 'before the snapshot');
  const snap = await sbx.createSnapshot();
  assert.ok(snap.snapshotId.length > 0);
  const name = `snap-${Date.now().toString(36)}`;
  try {
    // Listed, for everyone and for its sandbox.
    const all = await Sandbox.listSnapshots().nextItems();
    assert.ok(all.some((s) => s.snapshotId === snap.snapshotId), 'listSnapshots() has it');
    const mine = await sbx.listSnapshots().nextItems();
    assert.ok(mine.some((s) => s.snapshotId === snap.snapshotId), 'sbx.listSnapshots() has it');
    // A sandbox made from it sees the source's files, and is independent.
    const a = await Sandbox.create(snap.snapshotId);
    const b = await Sandbox.create(snap.snapshotId);
    assert.equal(await a.files.read('/tmp/state.txt'), 'before the snapshot');
    await a.files.write('/tmp/state.txt', 'changed in a');
    assert.equal(await b.files.read('/tmp/state.txt'), 'before the snapshot');
    assert.equal(await sbx.files.read('/tmp/state.txt'), 'before the snapshot');
    assert.equal((await a.getInfo()).templateId, snap.snapshotId);
    // A named snapshot, found by its name.
    const named = await sbx.createSnapshot({ name });
    assert.equal(named.snapshotId, name);
    assert.deepEqual(named.names, [name]);
    const byName = await Sandbox.listSnapshots({ name }).nextItems();
    assert.deepEqual(byName.map((s) => s.snapshotId), [name]);
    assert.equal((await Sandbox.listSnapshots({ name: `${name}-none` }).nextItems()).length, 0);
    // It outlives its sandbox.
    await sbx.kill();
    const c = await Sandbox.create(name);
    assert.equal(await c.files.read('/tmp/state.txt'), 'before the snapshot');
    // Deleted once: true, then false; a create from it no longer finds it.
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false);
    assert.equal(await Sandbox.deleteSnapshot(name), true);
    await rejects(() => Sandbox.create(snap.snapshotId), Error, 'a create from a deleted snapshot');
    for (const s of [a, b, c])
      await s.kill();
  } finally { // a failed run leaves no record in the store
    await Sandbox.deleteSnapshot(snap.snapshotId);
    await Sandbox.deleteSnapshot(name);
  }
  report({ ok: true });
} else if (part === 'fork') {
  const sbx = await Sandbox.create(template);
  await sbx.files.write('/tmp/state.txt', 'state before fork');
  const forks = await sbx.fork({ count: 3, timeoutMs: 120_000 });
  assert.equal(forks.length, 3);
  const ids = new Set();
  for (const f of forks) {
    assert.ok(f instanceof Sandbox, `a fork failed: ${f?.message}`);
    ids.add(f.sandboxId);
    assert.equal(await f.isRunning(), true);
    assert.equal(await f.files.read('/tmp/state.txt'), 'state before fork');
  }
  assert.equal(ids.size, 3);
  assert.ok(!ids.has(sbx.sandboxId));
  await forks[0].files.write('/tmp/state.txt', 'modified in fork');
  assert.equal(await forks[1].files.read('/tmp/state.txt'), 'state before fork');
  assert.equal(await sbx.files.read('/tmp/state.txt'), 'state before fork');
  assert.equal(await sbx.isRunning(), true, 'the source keeps running');
  // A fork's end is its own timeout, not the source's.
  const end = (await forks[0].getInfo()).endAt.getTime() - Date.now();
  assert.ok(end > 60_000 && end <= 121_000, `a fork's end is ${end} ms away`);
  // By id, with the static method.
  const [byId] = await Sandbox.fork(sbx.sandboxId);
  assert.ok(byId instanceof Sandbox);
  for (const f of [...forks, byId])
    await f.kill();
  await sbx.kill();
  await rejects(() => sbx.fork(), e2b.SandboxNotFoundError, 'fork of a killed sandbox');
  report({ ok: true });
} else if (part === 'network') {
  // allowOut with denyOut all -> dsec's allow-list; updateNetwork replaces it.
  const sbx = await Sandbox.create(template, {
    network: { allowOut: ['10.1.2.3'], denyOut: [e2b.ALL_TRAFFIC] } });
  const dial = async (ip) => {
    await sbx.commands.run(`timeout 2 bash -c 'echo > /dev/tcp/${ip}/80' || true`);
  };
  const denied = async () => (await native(sbx.sandboxId)).denials.recent.join(' ');
  await dial('10.1.2.3');
  await dial('10.9.9.9');
  let recent = await denied();
  assert.ok(recent.includes('10.9.9.9:80'), `not allowed: ${recent}`);
  assert.ok(!recent.includes('10.1.2.3:80'), `allowed: ${recent}`);
  await sbx.updateNetwork({ allowOut: ['10.9.9.0/24'], denyOut: [e2b.ALL_TRAFFIC] });
  await dial('10.1.2.3');
  recent = await denied();
  assert.ok(recent.includes('10.1.2.3:80'), `no longer allowed: ${recent}`);
  const before = (await native(sbx.sandboxId)).denials.network;
  await dial('10.9.9.9');
  assert.equal((await native(sbx.sandboxId)).denials.network, before, 'now allowed');
  // denyOut of one address alone: the internet open but that address.
  await sbx.updateNetwork({ denyOut: ['10.9.9.9'] });
  const open = (await native(sbx.sandboxId)).denials.network;
  await dial('10.1.2.3');
  assert.equal((await native(sbx.sandboxId)).denials.network, open, 'the internet is open');
  await dial('10.9.9.9');
  assert.ok((await native(sbx.sandboxId)).denials.network > open, 'the denied address');
  // What dsec cannot do is refused by name, not ignored.
  const e = await rejects(() => sbx.updateNetwork({ denyOut: ['example.com'] }), Error, 'a domain');
  assert.match(e.message, /denyOut/);
  const m = await rejects(() => Sandbox.create(template, { network: { maskRequestHost: 'x y' } }),
                          Error, 'a bad maskRequestHost');
  assert.match(m.message, /maskRequestHost/);
  await sbx.kill();
  await rejects(() => Sandbox.updateNetwork(sbx.sandboxId, {}), NotFoundError, 'a killed sandbox');
  report({ ok: true });
} else if (part === 'metrics') {
  const start = new Date(Date.now() - 1000);
  const sbx = await Sandbox.create(template);
  await sbx.commands.run('dd if=/dev/zero of=/var/tmp/fill bs=1M count=8 2>/dev/null && sync');
  let metrics = await sbx.getMetrics();
  assert.ok(metrics.length > 0);
  const m = metrics[metrics.length - 1];
  for (const f of ['cpuCount', 'cpuUsedPct', 'memUsed', 'memTotal', 'diskUsed', 'diskTotal'])
    assert.equal(typeof m[f], 'number', `${f} of ${JSON.stringify(m)}`);
  assert.ok(m.diskUsed >= 8 << 20, `diskUsed ${m.diskUsed} after writing 8 MiB`);
  assert.ok(m.diskTotal >= m.diskUsed);
  assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal);
  // The node keeps sampling: a history, in time order.
  for (let i = 0; i < 60 && metrics.length < 3; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    metrics = await sbx.getMetrics({ start });
  }
  assert.ok(metrics.length >= 3, `${metrics.length} samples after a while`);
  for (let i = 1; i < metrics.length; i++)
    assert.ok(metrics[i - 1].timestamp <= metrics[i].timestamp);
  const old = await sbx.getMetrics({ start: new Date(start.getTime() - 3600_000),
                                     end: new Date(start.getTime() - 1800_000) });
  assert.equal(old.length, 0, 'nothing before the sandbox existed');
  await sbx.kill();
  await rejects(() => sbx.getMetrics(), e2b.SandboxNotFoundError, 'metrics of a killed sandbox');
  report({ ok: true, samples: metrics.length });
} else if (part === 'secure') {
  const sbx = await Sandbox.create(template, { secure: true });
  assert.ok(sbx.envdAccessToken, 'a secure sandbox has an envd access token');
  await sbx.files.write('/tmp/hello.txt', 'hello world');
  // A signed download URL works with no header at all.
  let r = await fetch(await sbx.downloadUrl('/tmp/hello.txt'));
  assert.equal(r.status, 200);
  assert.equal(await r.text(), 'hello world');
  r = await fetch(await sbx.downloadUrl('/tmp/hello.txt', { useSignatureExpiration: 60 }));
  assert.equal(r.status, 200);
  r = await fetch(await sbx.downloadUrl('/tmp/hello.txt', { useSignatureExpiration: -10 }));
  assert.equal(r.status, 401);
  assert.deepEqual(await r.json(), { code: 401, message: 'signature is already expired' });
  // A URL signed for one path reads no other, and a write URL does not read.
  const other = new URL(await sbx.downloadUrl('/tmp/hello.txt'));
  other.searchParams.set('path', '/etc/passwd');
  assert.equal((await fetch(other)).status, 401);
  assert.equal((await fetch(await sbx.uploadUrl('/tmp/hello.txt'))).status, 401);
  // A signed upload URL writes.
  const form = new FormData();
  form.append('file', 'uploaded');
  r = await fetch(await sbx.uploadUrl('/tmp/up.txt', { useSignatureExpiration: 60 }),
                  { method: 'POST', body: form });
  assert.equal(r.status, 200);
  assert.equal(await sbx.files.read('/tmp/up.txt'), 'uploaded');
  // Without its token, envd refuses.
  r = await fetch(`${api}/files?path=/tmp/hello.txt`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } });
  assert.equal(r.status, 401);
  await sbx.kill();
  report({ ok: true });
} else {
  throw new Error(`unknown PART ${part}`);
}
