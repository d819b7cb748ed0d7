// The E2B side of bench/e2b_bench.py: N times, Sandbox.create(TEMPLATE) then
// commands.run('echo hi'), timing create and create -> first stdout byte;
// the kill is not timed. Prints one JSON line. Needs E2B_MODULE, E2B_API_URL,
// E2B_SANDBOX_URL, E2B_API_KEY.
const { Sandbox } = await import(process.env.E2B_MODULE);
const n = Number(process.env.N || 10);
const template = process.env.E2B_TEMPLATE || 'busybox';
const create = [];
const first = [];
for (let i = 0; i < n; i++) {
  const t0 = performance.now();
  const sbx = await Sandbox.create(template);
  const t1 = performance.now();
  let tFirst = 0;
  await sbx.commands.run('echo hi', { onStdout: () => { if (!tFirst) tFirst = performance.now(); } });
  create.push(t1 - t0);
  first.push((tFirst || performance.now()) - t0);
  await sbx.kill();
}
process.stdout.write(JSON.stringify({ create_ms: create, first_output_ms: first }) + '\n');
