// A wrong API key is refused with the SDK's AuthenticationError.
import { Sandbox, AuthenticationError, template, report, rejects } from './lib.mjs';

await rejects(() => Sandbox.create(template, { apiKey: 'e2b_wrong_key_000000000000' }), AuthenticationError,
  'create with a wrong key');
await rejects(() => Sandbox.list({ apiKey: 'e2b_wrong_key_000000000000' }).nextItems(), AuthenticationError,
  'list with a wrong key');
report({ ok: true });
