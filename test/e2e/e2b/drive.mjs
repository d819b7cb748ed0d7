// Connects to an existing sandbox by id (SANDBOX_ID), possibly through
// another node of the cluster, and drives it: command, files, list, kill.
import { Sandbox, assert, report } from './lib.mjs';

const id = process.env.SANDBOX_ID;
const sbx = await Sandbox.connect(id);
const r = await sbx.commands.run('echo via $(hostname)');
await sbx.files.write('/tmp/peer.txt', 'from a peer');
assert.equal(await sbx.files.read('/tmp/peer.txt'), 'from a peer');
const listed = (await (Sandbox.list({ query: { metadata: { from: 'e2b' } } })).nextItems()).map((s) => s.sandboxId);
assert.ok(listed.includes(id), `cluster list ${listed} lacks ${id}`);
const h = await sbx.commands.run('sleep 60', { background: true });
assert.equal(await sbx.commands.kill(h.pid), true);
report({ id, stdout: r.stdout, killed: process.env.KILL === '1' ? await sbx.kill() : false });
