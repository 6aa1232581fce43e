import { Methods } from '@dlm/protocol';
import { credentials, Client as GrpcClient, Metadata, status } from '@grpc/grpc-js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken, newToken, type RunningServer, startServer } from '../src/index.js';
import { frameProblem } from './frame-schema.js';
import { hostileValue, truncatedJson } from './fuzz-values.js';

// Property-based tests over the two HTTP doors, POST /v1/rpc and Dapr's lock API (and Dapr's gRPC
// door for good measure): malformed JSON, wrong types, unknown stores, huge bodies. Each request
// gets one clear answer (a documented status, a well-formed body, never INTERNAL) and the server
// keeps serving. DLM_FUZZ_RUNS=N multiplies the runs, as in fuzz.test.ts.
const SCALE = Math.max(1, Number(process.env.DLM_FUZZ_RUNS) || 1);
const RUNS = 600 * SCALE;
const TOKEN = newToken();
const LIMITED = newToken();
const OVERSIZE = 'x'.repeat(70_000);

let server: RunningServer;
let cases = 0;

beforeAll(async () => {
  server = await startServer({
    port: 0,
    auth: [
      { name: 'fuzz', sha256: hashToken(TOKEN) },
      { name: 'limited', sha256: hashToken(LIMITED), prefixes: ['f/'], actions: ['lock'] },
    ],
    dapr: { stores: { lockstore: 'f/', other: 'g/' }, grpcPort: 0 },
    limits: { maxInflight: 1_000 },
    service: { limits: { maxTtlMs: 2_000, maxWaitMs: 20 } },
  });
});
afterAll(async () => server?.close());

const weird = hostileValue;

/** A body: random text, cut JSON, JSON values, records of hostile fields, or far too much. */
function bodies(fields: Record<string, fc.Arbitrary<unknown>>): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
    { weight: 3, arbitrary: truncatedJson },
    { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)) },
    {
      weight: 8,
      arbitrary: fc.record(fields, { requiredKeys: [] }).map((v) => JSON.stringify(v)),
    },
    { weight: 1, arbitrary: fc.constant(OVERSIZE) },
  );
}

async function post(path: string, body: string, token = TOKEN) {
  cases += 1;
  const response = await fetch(`${server.httpUrl}${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${token}`,
      'dapr-api-token': token,
    },
    body,
  });
  return { status: response.status, text: await response.text() };
}

describe('fuzzing the HTTP doors', { timeout: SCALE > 1 ? 3_600_000 : 120_000 }, () => {
  it('POST /v1/rpc: every body gets one JSON-RPC reply (200, or 413 when too big), never INTERNAL', async () => {
    const params = fc.record(
      {
        name: weird,
        ttlMs: weird,
        waitMs: weird,
        owner: weird,
        token: weird,
        leaseKey: weird,
        mode: weird,
        limit: weird,
        locks: weird,
      },
      { requiredKeys: [] },
    );
    const body = bodies({
      jsonrpc: fc.oneof(fc.constant('2.0'), weird),
      id: fc.oneof(fc.integer(), fc.string({ maxLength: 8 }), weird),
      method: fc.oneof(fc.constantFrom(...Object.keys(Methods)), fc.string({ maxLength: 12 })),
      params: fc.oneof(params, weird),
    });
    await fc.assert(
      fc.asyncProperty(body, fc.boolean(), async (text, limited) => {
        const { status: code, text: reply } = await post(
          '/v1/rpc',
          text,
          limited ? LIMITED : TOKEN,
        );
        const expected = text === OVERSIZE ? 413 : 200;
        if (code !== expected) throw new Error(`HTTP ${code} for ${text.slice(0, 80)}: ${reply}`);
        const frame = JSON.parse(reply) as Record<string, any>;
        const problem = frameProblem(frame);
        if (problem) throw new Error(`${problem}: ${reply}`);
        if (frame.error?.data?.code === 'INTERNAL')
          throw new Error(`INTERNAL for ${text.slice(0, 80)}`);
      }),
      { numRuns: RUNS },
    );
  });

  it("Dapr's lock and unlock: every body gets Dapr's answer or error, never a 5xx", async () => {
    const store = fc.constantFrom('lockstore', 'other', 'nostore', '%zz', 'a%2Fb', 'x'.repeat(300));
    const body = bodies({
      resourceId: fc.oneof(fc.constantFrom('a', 'b'), weird),
      lockOwner: fc.oneof(fc.constantFrom('o1', 'o2'), weird),
      expiryInSeconds: fc.oneof(fc.constantFrom(1, 2), weird),
      resource_id: weird,
      lock_owner: weird,
    });
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('lock', 'unlock'),
        store,
        body,
        fc.boolean(),
        async (call, name, text, limited) => {
          const { status: code, text: reply } = await post(
            `/v1.0-alpha1/${call}/${name}`,
            text,
            limited ? LIMITED : TOKEN,
          );
          if (code === 404 && name.length > 256) return;
          if (![200, 400, 403, 413].includes(code))
            throw new Error(`HTTP ${code}: ${reply} for ${text.slice(0, 80)}`);
          const json = JSON.parse(reply) as Record<string, unknown>;
          if (code === 200) {
            const ok =
              call === 'lock'
                ? typeof json.success === 'boolean'
                : [0, 1, 2].includes(json.status as number);
            if (!ok) throw new Error(`200 with ${reply}`);
          } else if (typeof json.errorCode !== 'string' || typeof json.message !== 'string') {
            throw new Error(`error without errorCode and message: ${reply}`);
          }
        },
      ),
      { numRuns: RUNS },
    );
  });

  it("Dapr's gRPC door: random bytes get a status, never a crash", async () => {
    const client = new GrpcClient(`127.0.0.1:${server.daprGrpcPort}`, credentials.createInsecure());
    const allowed = new Set([
      status.OK,
      status.INVALID_ARGUMENT,
      status.INTERNAL,
      status.PERMISSION_DENIED,
    ]);
    const call = (method: string, bytes: Buffer) =>
      new Promise<number>((resolve) => {
        const metadata = new Metadata();
        metadata.set('dapr-api-token', TOKEN);
        client
          .makeUnaryRequest(
            `/dapr.proto.runtime.v1.Dapr/${method}`,
            (b: Buffer) => b,
            (b: Buffer) => b,
            bytes,
            metadata,
            () => {},
          )
          .on('status', (s) => resolve(s.code));
      });
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('TryLockAlpha1', 'UnlockAlpha1', 'GetMetadata'),
        fc.uint8Array({ maxLength: 80 }),
        async (method, bytes) => {
          cases += 1;
          const code = await call(method, Buffer.from(bytes));
          if (!allowed.has(code)) throw new Error(`${method}: status ${code}`);
        },
      ),
      { numRuns: RUNS / 2 },
    );
    client.close();
  });

  it('the server still serves, and the runs added up', async () => {
    const { status: code, text } = await post(
      '/v1/rpc',
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'lock.acquire',
        params: { name: 'f/after', ttlMs: 1_000 },
      }),
    );
    expect(code).toBe(200);
    expect(JSON.parse(text).result.name).toBe('f/after');
    expect(cases).toBeGreaterThanOrEqual(RUNS * 2.5);
  });
});
