// E2B's passwordless sudo (issue 27) with template `base` (base/e2b@1 and
// toolkit/e2b-sudo@1), through the unmodified SDK: commands run as `user`
// become root with `sudo`, as in E2B's base; -n, -u, -i, -E and VAR=value
// work; the environment is reset as Debian's sudo resets it (E2B's own
// test: a command-scoped env var does not reach a later `sudo echo`);
// exit codes and stdin pass through; a background command is killed with
// its sudo; in a terminal, sudo runs and Ctrl-C reaches the sudo'd command.
import { Sandbox, CommandExitError, assert, template, report } from './lib.mjs';

const dec = new TextDecoder();
const enc = new TextEncoder();
const sbx = await Sandbox.create(template, { metadata: { suite: 'sudo' } });
const run = async (cmd, opts) => (await sbx.commands.run(cmd, opts)).stdout.trim();
try {
  assert.equal(await run('whoami'), 'user');
  assert.equal(await run('sudo whoami'), 'root');
  assert.equal(await run('sudo -n true && echo ok'), 'ok');
  assert.equal(await run('sudo id -u; id -u'), '0\n1000');
  // Root's files: what `user` cannot touch, sudo can.
  assert.equal(await run('sudo sh -c "echo hi > /etc/made-by-sudo"; stat -c %U /etc/made-by-sudo'), 'root');
  assert.equal(await run('sudo cat /etc/shadow | grep -c "^user:"'), '1');
  // Debian's env_reset: HOME and USER of root, secure_path, SUDO_USER.
  assert.equal(await run('sudo sh -c \'echo $HOME $USER $SUDO_USER $SUDO_UID\''), '/root root user 1000');
  assert.equal(await run('sudo sh -c \'echo $PATH\''), '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
  // E2B's "bash command scoped env vars": the var set for one command is gone.
  assert.equal(await run('echo $FOO', { envs: { FOO: 'bar' } }), 'bar');
  const cmd2 = await sbx.commands.run('sudo echo "$FOO"');
  assert.equal(cmd2.exitCode, 0);
  assert.equal(cmd2.stdout.trim(), '');
  // ...kept with -E, set with VAR=value.
  assert.equal(await run('sudo -E sh -c \'echo $FOO\'', { envs: { FOO: 'kept' } }), 'kept');
  assert.equal(await run('sudo BAR=set sh -c \'echo $BAR\''), 'set');
  // Another user, a login shell, the working directory.
  assert.equal(await run('sudo -u nobody id -un'), 'nobody');
  assert.equal(await run('sudo -i pwd'), '/root');
  assert.equal(await run('cd /tmp && sudo pwd'), '/tmp');
  // stdin and the exit code pass through.
  assert.equal(await run('echo piped | sudo cat'), 'piped');
  const failed = await sbx.commands.run('sudo sh -c "exit 7"').catch((e) => e);
  assert.ok(failed instanceof CommandExitError, `exit 7: ${failed}`);
  assert.equal(failed.exitCode, 7);
  // Refused by name: an option dsec's sudo does not implement.
  const listed = await sbx.commands.run('sudo -l').catch((e) => e);
  assert.ok(listed instanceof CommandExitError && /-l is not supported/.test(listed.stderr), `${listed?.stderr}`);
  const missing = await sbx.commands.run('sudo no-such-tool').catch((e) => e);
  assert.ok(missing instanceof CommandExitError && /no-such-tool: command not found/.test(missing.stderr));
  // A background sudo killed through the SDK takes its root command along.
  const bg = await sbx.commands.run('sudo sleep 300', { background: true });
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await run('pgrep -u root -x sleep | wc -l'), '1');
  await bg.kill();
  let left = '1';
  for (let i = 0; i < 50 && left !== '0'; i++) {
    left = await run('pgrep -u root -x sleep | wc -l');
    if (left !== '0') await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(left, '0', 'the root sleep outlived its killed sudo');

  // In a terminal: sudo runs, sees the terminal, and Ctrl-C stops its command.
  let text = '';
  const t = await sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 0, onData: (d) => { text += dec.decode(d); } });
  const until = async (pattern) => {
    for (let i = 0; i < 200 && !text.includes(pattern); i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(text.includes(pattern), `no ${pattern} in ${JSON.stringify(text.slice(-500))}`);
  };
  await sbx.pty.sendInput(t.pid, enc.encode('sudo sh -c \'echo pty-$(id -un); test -t 0 && echo tty-yes\'\n'));
  await until('pty-root');
  await until('tty-yes');
  await sbx.pty.sendInput(t.pid, enc.encode('sudo sleep 300\n'));
  await new Promise((r) => setTimeout(r, 800));
  await sbx.pty.sendInput(t.pid, enc.encode('\x03'));
  await sbx.pty.sendInput(t.pid, enc.encode('echo after-$((40+2))\n'));
  await until('after-42');
  assert.equal(await run('pgrep -u root -x sleep | wc -l'), '0');
  await sbx.pty.kill(t.pid);
  report({ ok: true, id: sbx.sandboxId });
} finally {
  await sbx.kill();
}
