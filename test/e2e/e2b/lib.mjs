// Shared by the E2B scripts: loads the `e2b` package the test installed
// (E2B_MODULE, the path of its dist/index.mjs) and the connection options from
// the environment the SDK itself reads (E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY), so the scripts are plain E2B code.
import assert from 'node:assert/strict';

export const e2b = await import(process.env.E2B_MODULE);
export const { Sandbox, CommandExitError, TimeoutError, NotFoundError, AuthenticationError } = e2b;
export const template = process.env.E2B_TEMPLATE || 'base';
export { assert };

/// Prints one JSON line the Python side reads.
export function report(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

/// Runs `fn`, expecting it to throw an instance of `cls`; returns the error.
export async function rejects(fn, cls, what) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof cls, `${what}: expected ${cls.name}, got ${e?.constructor?.name}: ${e?.message}`);
    return e;
  }
  assert.fail(`${what}: expected ${cls.name}, nothing was thrown`);
}
