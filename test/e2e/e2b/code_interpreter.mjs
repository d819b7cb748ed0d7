// The unmodified @e2b/code-interpreter SDK against a dsec node: its default
// template (code-interpreter-v1 = base/code-interpreter@1 with E2B's user and
// sudo stacked on it), runCode with
// state between calls, onStdout streaming, errors, PNG results, contexts.
// E2B_MODULE here is the path of @e2b/code-interpreter's dist/index.mjs.
import { assert, report } from './lib.mjs';

const { Sandbox } = await import(process.env.E2B_MODULE);

const sbx = await Sandbox.create({ metadata: { suite: 'code-interpreter' } });
try {
  let ex = await sbx.runCode('x = 1');
  assert.equal(ex.error, undefined);
  ex = await sbx.runCode('x + 1');
  assert.equal(ex.text, '2');
  // issue 27: commands run as E2B's `user` in /home/user (toolkit/code-interpreter-user@1),
  // with its passwordless sudo; the interpreter's cells start in that home.
  assert.equal((await sbx.commands.run('whoami; pwd')).stdout, 'user\n/home/user\n');
  assert.equal((await sbx.commands.run('sudo whoami')).stdout, 'root\n');
  assert.equal((await sbx.runCode('import os\nos.getcwd()')).text, "'/home/user'");

  const lines = [];
  const at = [];
  ex = await sbx.runCode('import time\nfor i in range(3):\n    print(i)\n    time.sleep(0.4)', {
    onStdout: (m) => { lines.push(m.line); at.push(Date.now()); },
  });
  assert.deepEqual(lines.join(''), '0\n1\n2\n');
  assert.deepEqual(ex.logs.stdout.join(''), '0\n1\n2\n');
  assert.ok(at[at.length - 1] - at[0] > 500, `onStdout should stream: ${JSON.stringify(at)}`);

  ex = await sbx.runCode('raise KeyError("k")');
  assert.equal(ex.error.name, 'KeyError');
  assert.equal(ex.error.value, "'k'");
  assert.ok(ex.error.traceback.includes('KeyError'), ex.error.traceback);
  assert.equal((await sbx.runCode('x')).text, '1'); // the context survived

  ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()');
  const png = ex.results.find((r) => r.png);
  assert.ok(png, JSON.stringify(ex.results).slice(0, 300));
  const bytes = Buffer.from(png.png, 'base64');
  assert.equal(bytes.subarray(0, 8).toString('hex'), '89504e470d0a1a0a');

  const ctx = await sbx.createCodeContext();
  assert.equal((await sbx.runCode('x', { context: ctx })).error.name, 'NameError');
  const all = await sbx.listCodeContexts();
  assert.ok(all.some((c) => c.id === ctx.id));
  await sbx.removeCodeContext(ctx);
  report({ ok: true, id: sbx.sandboxId });
} finally {
  await sbx.kill();
}
