// Ports through the unmodified SDK (issue 26 part 3): a server started with
// commands.run in the background, then reached the three ways E2B clients
// do: getHost(port) (the Host header PORT-ID.DOMAIN, with the domain the
// create answered), E2B's client-proxy headers on E2B_SANDBOX_URL (how
// @e2b/code-interpreter reaches port 49999), and a sandbox created with
// allowPublicTraffic false, whose ports want its trafficAccessToken.
// PORT_SERVER is the server's source; DOMAIN the node's --sandbox-domain.
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { Sandbox, assert, template, report } from './lib.mjs';

const rest = new URL(process.env.E2B_SANDBOX_URL);
const server = readFileSync(process.env.PORT_SERVER, 'utf8');

/// GET `path` on the node with `headers`; resolves {status, body, chunks}.
function get(path, headers) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: rest.hostname, port: rest.port, path, headers }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push({ t: Date.now(), d: d.toString() }));
      res.on('end', () => resolve({ status: res.statusCode, body: chunks.map((c) => c.d).join(''), chunks }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function serve(sbx, port) {
  await sbx.files.write('/tmp/port_server.py', server);
  await sbx.commands.run(`python3 /tmp/port_server.py ${port}`, { background: true });
  for (let i = 0; i < 100; i++) {
    const r = await sbx.commands.run(`python3 -c "import socket; socket.create_connection(('127.0.0.1', ${port}))" && echo up || true`);
    if (r.stdout.includes('up')) return;
    await new Promise((ok) => setTimeout(ok, 200));
  }
  throw new Error('the server did not start');
}

const sbx = await Sandbox.create(template);
try {
  await serve(sbx, 8000);
  const host = sbx.getHost(8000);
  assert.equal(host, `8000-${sbx.sandboxId}.${process.env.DOMAIN}`);
  let r = await get('/', { Host: host, 'X-API-Key': process.env.E2B_API_KEY });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.body, 'hello from the sandbox\n');

  // The client-proxy headers, as the SDKs send them on E2B_SANDBOX_URL.
  r = await get('/stream?n=4&every=0.5', {
    'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000', 'X-API-Key': process.env.E2B_API_KEY,
  });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.body.trim().split('\n').length, 4);
  const spread = r.chunks.at(-1).t - r.chunks[0].t; // produced over 1.5 s
  assert.ok(spread > 700, `the NDJSON lines should arrive as produced: ${JSON.stringify(r.chunks)}`);
} finally {
  await sbx.kill();
}

const priv = await Sandbox.create(template, { network: { allowPublicTraffic: false } });
try {
  assert.ok(priv.trafficAccessToken, 'allowPublicTraffic false answers a trafficAccessToken');
  await serve(priv, 8001);
  const host = priv.getHost(8001);
  const key = { 'X-API-Key': process.env.E2B_API_KEY };
  let r = await get('/', { Host: host, ...key });
  assert.equal(r.status, 401, r.body);
  r = await get('/', { Host: host, ...key, 'e2b-traffic-access-token': 'wrong' });
  assert.equal(r.status, 403, r.body);
  r = await get('/', { Host: host, ...key, 'e2b-traffic-access-token': priv.trafficAccessToken });
  assert.equal(r.status, 200, r.body);
} finally {
  await priv.kill();
}
report({ ok: true });
