// E2B's template build API (issue 27) through the unmodified SDK; PART picks
// one: build (build, exists, tags, create from it), rebuild (the same
// template again: cached), refused (what dsec does not build, by name),
// startbuild and startcreate (setStartCmd: templates whose sandboxes start a
// server, or fail their ready command; created after a node restart too),
// inherit (children of the server template: theirs or the parent's command),
// frombase (a template from E2B's `base`, a stack of two layers).
// NAME is the template's name, CONTEXT a directory with folder/test.txt and
// hello.txt, BASE the template it builds from.
import { Sandbox, assert, report, e2b } from './lib.mjs';

const { Template, BuildError } = e2b;
const part = process.env.PART;
const name = process.env.NAME;
const base = process.env.BASE || 'busybox';
const context = process.env.CONTEXT;

/// The template every part builds: files, env, workdir and a RUN using them.
function appTemplate() {
  return Template({ fileContextPath: context })
    .fromTemplate(base)
    .setWorkdir('/app')
    .copy('folder/*', 'folder')
    .copy('hello.txt', '/etc/hello.txt')
    .setEnvs({ GREETING: 'hi "there" $HOME' })
    .runCmd('cat folder/test.txt > copied.txt && echo "$GREETING" > greeting.txt');
}

/// Builds `template` as `target`; its log lines and the time it took.
async function build(template, target, opts = {}) {
  const logs = [];
  const t0 = Date.now();
  let info;
  try {
    info = await Template.build(template, target, {
      cpuCount: 1, memoryMB: 256, onBuildLogs: (l) => logs.push(l.message ?? String(l)), ...opts,
    });
  } catch (e) {
    console.error(`build of ${target} failed: ${e.message}\n${logs.slice(-20).join('\n')}`);
    throw e;
  }
  return { info, logs, ms: Date.now() - t0 };
}

/// Expects `fn` to throw a BuildError whose message names `named`.
async function refused(fn, named, what) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof BuildError || e instanceof e2b.TemplateError || e instanceof Error,
              `${what}: ${e}`);
    assert.ok(String(e.message).includes(named), `${what}: "${e.message}" does not name ${named}`);
    return e.message;
  }
  assert.fail(`${what}: nothing was thrown`);
}

if (part === 'build') {
  const { info, logs, ms } = await build(appTemplate(), `${name}:v1`, { tags: ['stable'] });
  assert.equal(info.templateId, name);
  assert.ok(info.buildId.length > 0);
  assert.ok(logs.some((l) => l.includes('RUN')), `the log shows the RUN step: ${logs.join('\n')}`);
  // The build's status, read back.
  const status = await Template.getBuildStatus(info);
  assert.equal(status.status, 'ready');
  // Names and tags.
  assert.equal(await Template.exists(name), true);
  assert.equal(await Template.exists(`${name}-none`), false);
  assert.equal(await Template.exists('base'), true);
  let tags = (await Template.getTags(name)).map((t) => t.tag).sort();
  assert.deepEqual(tags, ['stable', 'v1']);
  const assigned = await Template.assignTags(`${name}:v1`, ['prod', 'latest']);
  assert.equal(assigned.buildId, info.buildId);
  assert.deepEqual(assigned.tags, ['prod', 'latest']);
  await Template.removeTags(name, 'stable');
  tags = (await Template.getTags(name)).map((t) => t.tag).sort();
  assert.deepEqual(tags, ['latest', 'prod', 'v1']);
  await refused(() => Template.assignTags(`${name}:v1`, ':bad'), 'tag', 'a tag with a colon');
  await refused(() => Template.removeTags(`${name}-none`, 'v1'), 'not found', 'an unknown template');
  // A sandbox from a tag has the files, env and workdir the build made.
  const sbx = await Sandbox.create(`${name}:prod`);
  try {
    const r = await sbx.commands.run('cat /app/copied.txt; cat /app/greeting.txt; echo "env=$GREETING"; pwd');
    assert.equal(r.stdout, 'This is a test file.\nhi "there" $HOME\nenv=hi "there" $HOME\n/app\n');
    assert.equal(await sbx.files.read('/etc/hello.txt'), 'hello from the context\n');
    assert.equal((await sbx.getInfo()).templateId, `${name}:prod`);
  } finally {
    await sbx.kill();
  }
  report({ ok: true, buildId: info.buildId, ms, logLines: logs.length });
} else if (part === 'rebuild') {
  const { info, logs, ms } = await build(appTemplate(), `${name}:v2`);
  const cached = logs.filter((l) => l.includes('CACHED')).length;
  const sbx = await Sandbox.create(`${name}:v2`);
  try {
    assert.equal(await sbx.files.read('/app/copied.txt'), 'This is a test file.\n');
  } finally {
    await sbx.kill();
  }
  report({ ok: true, buildId: info.buildId, ms, cached });
} else if (part === 'refused') {
  const out = {};
  out.hub = await refused(() => build(Template().fromImage('ubuntu:22.04').runCmd('true'), `${name}:x`),
                          'ubuntu:22.04', 'a Docker Hub image');
  out.start = await refused(
    () => build(Template({ fileContextPath: context }).fromTemplate(base)
      .copy('hello.txt', '/h.txt', { mode: 0o600 }),
                `${name}:x`),
    'mode', "copy's mode");
  out.unknown = await refused(() => build(Template().fromTemplate(`${name}-none`), `${name}:x`),
                              `${name}-none`, 'an unknown base template');
  out.failing = await refused(
    () => build(Template().fromTemplate(base).runCmd('echo about to fail; exit 3'), `${name}:x`),
    'exited with code 3', 'a failing RUN');
  // Nothing was tagged by the failed builds.
  assert.equal(await Template.exists(`${name}`), false);
  report({ ok: true, ...out });
} else if (part === 'startbuild') {
  // setStartCmd: an HTTP server started in every sandbox of the template, as
  // its user, in its workdir, with its env; the ready command polls it.
  const server = Template({ fileContextPath: context })
    .fromTemplate(base)
    .setWorkdir('/srv')
    .runCmd('echo hello-from-start > index.html')
    .setEnvs({ GREETING: 'hi' })
    .setStartCmd('echo "$GREETING from $(pwd) as $(id -u) with $EXTRA" > started.txt; exec httpd -f -p 8000 -h /srv',
                 'wget -q -O /dev/null http://127.0.0.1:8000/index.html');
  await build(server, `${name}-start:v1`);
  // Ready at build time; a sandbox created with FAIL_READY set has a start
  // command that fails and a ready command that never succeeds.
  const never = Template().fromTemplate(base).setStartCmd(
    'if [ -n "$FAIL_READY" ]; then echo no server here >&2; exit 3; fi; exec sleep 100000',
    '[ -z "$FAIL_READY" ]');
  await build(never, `${name}-never:v1`);
  // As in E2B, the build runs the start command: one that fails fails the
  // build at its last step (the SDK points at setStartCmd).
  const failing = await refused(
    () => build(Template().fromTemplate(base).setStartCmd('./no-such-server', 'sleep 1'),
                `${name}-failing:v1`),
    'exited with code 127', 'a start command that fails at build');
  report({ ok: true, failing });
} else if (part === 'startcreate') {
  const t0 = Date.now();
  const sbx = await Sandbox.create(`${name}-start:v1`, { envs: { EXTRA: 'extra' } });
  const createMs = Date.now() - t0;
  try {
    // At once: the server answers through the node's port proxy, from outside.
    const url = process.env.E2B_SANDBOX_URL;
    const res = await fetch(`${url}/index.html`, {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' },
    });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'hello-from-start\n');
    assert.equal(await sbx.files.read('/srv/started.txt'), 'hi from /srv as 0 with extra\n');
    // Directories report a size as on E2B's ext4 (issue 27): a new one in
    // the writable upper, one of the layers, one of both.
    await sbx.files.makeDir('/srv/empty');
    for (const dir of ['/srv/empty', '/etc', '/srv']) {
      const info = await sbx.files.getInfo(dir);
      assert.equal(info.type, 'dir');
      assert.ok(info.size >= 4096 && info.size % 4096 === 0, `${dir}: size ${info.size}`);
    }
    assert.ok((await sbx.files.list('/srv')).find((e) => e.name === 'empty').size >= 4096);
    const procs = await sbx.commands.list();
    assert.ok(procs.some((p) => `${p.cmd} ${(p.args || []).join(' ')}`.includes('httpd')),
              `the start command runs: ${JSON.stringify(procs)}`);
  } finally {
    await sbx.kill();
  }
  // The ready command never succeeds: the create fails within the sandbox's
  // timeout, naming the command and what became of the start command.
  let message = '';
  const t1 = Date.now();
  try {
    await Sandbox.create(`${name}-never:v1`, { timeoutMs: 3000, envs: { FAIL_READY: '1' } });
  } catch (e) {
    message = String(e.message);
  }
  const failMs = Date.now() - t1;
  assert.ok(message.includes('[ -z "$FAIL_READY" ]'), `the failure names the ready command: ${message}`);
  assert.ok(message.includes('exited with code 3'), `and the start command's exit: ${message}`);
  assert.ok(message.includes('no server here'), `and its output: ${message}`);
  report({ ok: true, createMs, failMs, message });
} else if (part === 'inherit') {
  // A child of the server template that sets no start command runs the
  // parent's (on E2B it starts from the parent's running snapshot); one that
  // sets its own runs only its own.
  const { logs } = await build(
    Template().fromTemplate(`${name}-start:v1`).runCmd('echo from-child > child.txt'),
    `${name}-child:v1`);
  assert.ok(logs.some((l) => l.includes(`Start and ready commands of ${name}-start:v1`)),
            `the log says what the child took: ${logs.join('\n')}`);
  await build(Template().fromTemplate(`${name}-start:v1`)
                .setStartCmd('exec sleep 100000', 'true'), `${name}-own:v1`);
  const child = await Sandbox.create(`${name}-child:v1`);
  try {
    const res = await fetch(`${process.env.E2B_SANDBOX_URL}/index.html`, {
      headers: { 'E2b-Sandbox-Id': child.sandboxId, 'E2b-Sandbox-Port': '8000' },
    });
    assert.equal(res.status, 200, 'the parent\'s server runs in the child');
    assert.equal(await res.text(), 'hello-from-start\n');
    assert.equal(await child.files.read('/srv/child.txt'), 'from-child\n');
  } finally {
    await child.kill();
  }
  const own = await Sandbox.create(`${name}-own:v1`);
  let cmds;
  try {
    cmds = (await own.commands.list()).map((p) => `${p.cmd} ${(p.args || []).join(' ')}`);
    assert.ok(cmds.some((c) => c.includes('sleep 100000')), `its own: ${cmds}`);
    assert.ok(!cmds.some((c) => c.includes('httpd')), `not the parent's: ${cmds}`);
  } finally {
    await own.kill();
  }
  report({ ok: true, cmds });
} else if (part === 'frombase') {
  // E2B's `base` is two layers here (the Debian image and its sudo layer):
  // a template from it holds both.
  const { logs } = await build(Template().fromTemplate('base').runCmd('echo built > /tmp/built.txt'),
                               `${name}-base:v1`);
  assert.ok(logs.some((l) => l.includes('FROM base/e2b@1 + toolkit/e2b-sudo@1')), logs.join('\n'));
  const sbx = await Sandbox.create(`${name}-base:v1`);
  try {
    assert.equal(await sbx.files.read('/tmp/built.txt'), 'built\n');
    assert.equal((await sbx.commands.run('whoami')).stdout.trim(), 'user');
    assert.equal((await sbx.commands.run('sudo whoami')).stdout.trim(), 'root');
  } finally {
    await sbx.kill();
  }
  report({ ok: true });
} else {
  throw new Error(`unknown PART ${part}`);
}
