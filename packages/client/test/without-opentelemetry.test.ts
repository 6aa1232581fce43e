import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { createLogger } from '@dlm/server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useServer } from './support.js';

// `@opentelemetry/api` is an optional peer: an application without it must not notice the
// client's tracing. Here it is installed (a dev dependency), so a child Node process is made
// to lack it: a module resolve hook answers ERR_MODULE_NOT_FOUND for it, as Node does when
// the package is not there. The child runs the built client against a real server.
const CLIENT = new URL('../dist/index.js', import.meta.url);

const served = useServer({ logger: createLogger('error', () => {}) });
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'dlm-client-no-otel-'));
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
});

describe('without @opentelemetry/api installed', () => {
  it('acquires, waits and releases as before', async () => {
    if (!existsSync(CLIENT)) throw new Error(`${CLIENT.pathname} is missing: build first`);
    writeFileSync(
      join(dir, 'hooks.mjs'),
      `export async function resolve(specifier, context, next) {
  if (specifier === '@opentelemetry/api') {
    throw Object.assign(new Error("Cannot find package '@opentelemetry/api'"), { code: 'ERR_MODULE_NOT_FOUND' });
  }
  return next(specifier, context);
}
`,
    );
    writeFileSync(
      join(dir, 'register.mjs'),
      `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(join(dir, 'hooks.mjs')).href)});\n`,
    );
    writeFileSync(
      join(dir, 'main.mjs'),
      `const missing = await import('@opentelemetry/api').then(() => false, (error) => error.code === 'ERR_MODULE_NOT_FOUND');
const { createClient } = await import(${JSON.stringify(CLIENT.href)});
const client = createClient({ url: process.argv[2] });
const first = await client.acquire('no-otel', { ttlMs: 5_000 });
const waiting = client.acquire('no-otel', { ttlMs: 5_000, waitMs: 5_000 });
setTimeout(() => void first.release(), 50);
const second = await waiting;
await second.release();
await client.close();
console.log(JSON.stringify({ missing, tokens: [String(first.token), String(second.token)] }));
`,
    );
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        '--import',
        pathToFileURL(join(dir, 'register.mjs')).href,
        join(dir, 'main.mjs'),
        served.server.url,
      ],
      { timeout: 30_000 },
    );
    const outcome = JSON.parse(stdout) as { missing: boolean; tokens: string[] };
    // The hook did hide the package: without that, this test would prove nothing.
    expect(outcome.missing).toBe(true);
    const [first, second] = outcome.tokens.map(BigInt);
    expect(second).toBeGreaterThan(first!);
  });
});
