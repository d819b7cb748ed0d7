// Creates one sandbox and leaves it running; prints its id (the Python side
// checks it through the native API, then kills it).
import { Sandbox, template, report } from './lib.mjs';

const sbx = await Sandbox.create(template, { metadata: { from: 'e2b' }, timeoutMs: 300_000 });
const r = await sbx.commands.run('echo made');
report({ id: sbx.sandboxId, stdout: r.stdout });
