import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Methods } from '@dlm/protocol';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken, newToken, type RunningServer, startServer } from '../src/index.js';
import { type FuzzPeer, fuzzPeer, type Outcome } from './fuzz-peer.js';
import { hostileValue, truncatedJson } from './fuzz-values.js';

// Property-based tests over the wire protocol, against an in-process server with tokens and
// small TTL and wait bounds (so that whatever the fuzzer acquires expires within the run).
//
// Cases (one frame or one operation each) in CI: about 3,000 random frames, 3,000 random JSON
// values, 1,000 multi-message frames of 0-8 random JSON values, about 3,000 random requests and
// 2,700 interleaved operations: over 10,000 in all (the last test asserts the count). `DLM_FUZZ_RUNS=N` runs every property N times as many runs as that
// (`DLM_FUZZ_RUNS=20 pnpm vitest run --project server test/fuzz.test.ts` is a long run).
const SCALE = Math.max(1, Number(process.env.DLM_FUZZ_RUNS) || 1);
const FRAME_RUNS = 3_000 * SCALE;
const JSON_RUNS = 3_000 * SCALE;
const REQUEST_RUNS = 500 * SCALE; // batches of 1-20 requests
const INTERLEAVING_RUNS = 150 * SCALE; // 2-6 batches of 1-8 operations over 3 sessions
const LONG = SCALE > 1;

/** Close codes the server documents (SPEC.md); anything else is a bug. */
const DOCUMENTED_CLOSES = new Set([1000, 1001, 1009, 4004, 4006, 4008]);

const ADMIN = newToken();
const LIMITED = newToken();

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
function heapAfterGc(): number {
  for (let i = 0; i < 3; i += 1) gc();
  return process.memoryUsage().heapUsed;
}

let server: RunningServer;
let cases = 0;
const casesBy: Record<string, number> = {};
function count(property: string): void {
  cases += 1;
  casesBy[property] = (casesBy[property] ?? 0) + 1;
}
const problems: string[] = [];
const peers = new Set<FuzzPeer>();

async function open(
  options: { hello?: boolean; token?: string; multi?: boolean } = {},
): Promise<FuzzPeer> {
  const peer = await fuzzPeer(
    server.url,
    { headers: { authorization: `Bearer ${options.token ?? ADMIN}` } },
    options.multi,
  );
  peers.add(peer);
  if (options.hello !== false) {
    const hello = await peer.request('session.hello', {
      client: { name: 'fuzz', version: '0' },
      ...(options.multi ? { frames: 'multi' } : {}),
    });
    if (!hello.reply?.result) throw new Error(`hello failed: ${JSON.stringify(hello)}`);
  }
  return peer;
}

async function retire(peer: FuzzPeer): Promise<void> {
  problems.push(...peer.problems);
  peers.delete(peer);
  await peer.close();
}

/** The id the server should answer a frame with, by the protocol's rules. */
function expectedId(text: string): string | number | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const { id } = value as { id?: unknown };
  if (typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id))) return id;
  return null;
}

/**
 * Checks one outcome: a reply with the expected id, or a close with a documented code, and
 * nothing off-protocol on the peer so far. Throws, so that fast-check shrinks the case.
 */
function checkOutcome(
  peer: FuzzPeer,
  outcome: Outcome,
  id: string | number | null,
  what: string,
): void {
  if (peer.problems.length) throw new Error(`${what}: ${peer.problems.join('; ')}`);
  if (outcome.closed !== undefined) {
    if (!DOCUMENTED_CLOSES.has(outcome.closed))
      throw new Error(`${what}: closed with undocumented code ${outcome.closed}`);
    return;
  }
  if (outcome.reply.id !== id)
    throw new Error(`${what}: answered id ${outcome.reply.id}, expected ${id}`);
  if ((outcome.reply.result === undefined) === (outcome.reply.error === undefined))
    throw new Error(`${what}: reply has neither or both of result and error`);
}

const OVERSIZE = 'x'.repeat(70_000);

beforeAll(async () => {
  server = await startServer({
    port: 0,
    auth: [
      { name: 'fuzz-admin', sha256: hashToken(ADMIN), actions: ['lock', 'watch', 'admin'] },
      { name: 'fuzz-limited', sha256: hashToken(LIMITED), prefixes: ['f/'] },
    ],
    limits: {
      messagesPerSecond: 1_000_000,
      messageBurst: 1_000_000,
      maxWatchesPerSession: 20,
      maxLocksPerSession: 200,
    },
    service: { limits: { maxTtlMs: 2_000, maxWaitMs: 20 } },
  });
});
afterAll(async () => {
  for (const peer of peers) await peer.close();
  await server?.close();
});

describe('fuzzing the protocol', { timeout: LONG ? 3_600_000 : 120_000 }, () => {
  let heapBefore = 0;

  it('warms up, then measures the heap', async () => {
    const peer = await open();
    for (let i = 0; i < 200; i += 1) {
      await peer.request('lock.acquire', { name: `warm/${i % 10}`, ttlMs: 100, owner: `w${i}` });
    }
    await retire(peer);
    heapBefore = heapAfterGc();
    expect(heapBefore).toBeGreaterThan(0);
  });

  it('random frames (text, binary, truncated JSON, oversize) each get one reply or a documented close', async () => {
    let peer = await open({ hello: false });
    const frame = fc.oneof(
      { weight: 10, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
      { weight: 5, arbitrary: fc.string({ unit: 'grapheme', maxLength: 100 }) },
      { weight: 10, arbitrary: truncatedJson },
      { weight: 3, arbitrary: fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes)) },
      { weight: 1, arbitrary: fc.constant(OVERSIZE) },
    );
    await fc.assert(
      fc.asyncProperty(frame, async (data) => {
        count('frames');
        if (!peer.isOpen()) {
          await retire(peer);
          peer = await open({ hello: false });
        }
        const id = typeof data === 'string' ? expectedId(data) : null;
        const outcome = await peer.send(data, id);
        if (data === OVERSIZE) {
          if (outcome.closed !== 1009) throw new Error(`oversize: ${JSON.stringify(outcome)}`);
          return;
        }
        checkOutcome(peer, outcome, id, `frame ${JSON.stringify(String(data).slice(0, 80))}`);
      }),
      { numRuns: FRAME_RUNS },
    );
    await retire(peer);
    expect(problems).toEqual([]);
  });

  it('random JSON values each get one reply, with their id when they have a readable one', async () => {
    let peer = await open();
    const value = fc.oneof(
      fc.jsonValue({ maxDepth: 4 }),
      fc.record(
        {
          jsonrpc: fc.oneof(fc.constant('2.0'), fc.jsonValue({ maxDepth: 1 })),
          id: fc.oneof(fc.integer(), fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 1 })),
          method: fc.oneof(fc.constantFrom(...Object.keys(Methods)), fc.string({ maxLength: 12 })),
          params: fc.jsonValue({ maxDepth: 3 }),
        },
        { requiredKeys: [] },
      ),
    );
    await fc.assert(
      fc.asyncProperty(value, async (json) => {
        count('json');
        if (!peer.isOpen()) {
          await retire(peer);
          peer = await open();
        }
        const text = JSON.stringify(json);
        const id = expectedId(text);
        const method =
          typeof json === 'object' && json !== null && 'method' in json
            ? String(json.method)
            : undefined;
        checkOutcome(peer, await peer.send(text, id, method), id, `json ${text.slice(0, 80)}`);
      }),
      { numRuns: JSON_RUNS },
    );
    await retire(peer);
    expect(problems).toEqual([]);
  });

  it('multi-message frames of random JSON values: every member gets its own reply, by its id', async () => {
    let peer = await open({ multi: true });
    const member = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.record(
        {
          jsonrpc: fc.oneof(fc.constant('2.0'), fc.jsonValue({ maxDepth: 1 })),
          id: fc.oneof(fc.integer(), fc.jsonValue({ maxDepth: 1 })),
          method: fc.oneof(fc.constantFrom(...Object.keys(Methods)), fc.string({ maxLength: 12 })),
          params: fc.jsonValue({ maxDepth: 3 }),
        },
        { requiredKeys: [] },
      ),
    );
    let seq = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(member, { minLength: 0, maxLength: 8 }), async (members) => {
        count('multi');
        if (!peer.isOpen()) {
          await retire(peer);
          peer = await open({ multi: true });
        }
        // A readable id gets a fresh one, so that ids are unique among pending requests.
        const sent = members.map((value) => {
          if (expectedId(JSON.stringify(value)) === null) return value;
          seq += 1;
          return { ...(value as object), id: `m${seq}` };
        });
        const text = JSON.stringify(sent);
        const ids = sent.length ? sent.map((value) => expectedId(JSON.stringify(value))) : [null];
        const methods = sent.map((value) =>
          typeof value === 'object' && value !== null && 'method' in value
            ? String(value.method)
            : undefined,
        );
        const outcomes = await peer.sendMany(text, ids, methods);
        for (const [i, outcome] of outcomes.entries()) {
          checkOutcome(peer, outcome, ids[i]!, `member ${i} of ${text.slice(0, 120)}`);
        }
      }),
      { numRuns: JSON_RUNS / 3 },
    );
    await retire(peer);
    expect(problems).toEqual([]);
  });

  it('batches of random requests with hostile params are all answered, none INTERNAL, results on schema', async () => {
    const weird = hostileValue;
    const params = fc.oneof(
      {
        weight: 4,
        arbitrary: fc.record(
          {
            name: weird,
            ttlMs: weird,
            waitMs: weird,
            owner: weird,
            token: weird,
            prefix: weird,
            watchId: fc.oneof(weird, fc.constantFrom('w1', 'w2', 'w3')),
            auth: weird,
            client: fc.jsonValue({ maxDepth: 2 }),
          },
          { requiredKeys: [] },
        ),
      },
      { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
    );
    const request = fc.record({
      method: fc.oneof(
        { weight: 8, arbitrary: fc.constantFrom(...Object.keys(Methods)) },
        { weight: 1, arbitrary: fc.string({ maxLength: 16 }) },
      ),
      params,
      limited: fc.boolean(),
    });
    let full = await open();
    let limited = await open({ token: LIMITED });
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(request, { minLength: 1, maxLength: 20 }), async (batch) => {
        run += 1;
        // New sessions now and then, so watches and held locks do not pile up in one.
        if (run % 25 === 0 || !full.isOpen() || !limited.isOpen()) {
          await Promise.all([retire(full), retire(limited)]);
          [full, limited] = await Promise.all([open(), open({ token: LIMITED })]);
        }
        const sent = batch.map(({ method, params, limited: useLimited }) => {
          count('requests');
          const peer = useLimited ? limited : full;
          return peer.request(method, params).then((outcome) => ({ outcome, method, peer }));
        });
        for (const { outcome, method, peer } of await Promise.all(sent)) {
          checkOutcome(peer, outcome, outcome.reply?.id ?? null, method);
          // A request with a known method is refused only with a request-level code.
          const code = outcome.reply?.error?.data?.code;
          if (Object.hasOwn(Methods, method) && code === 'METHOD_NOT_FOUND')
            throw new Error(`${method}: METHOD_NOT_FOUND`);
        }
      }),
      { numRuns: REQUEST_RUNS },
    );
    await Promise.all([retire(full), retire(limited)]);
    expect(problems).toEqual([]);
  });

  it('random interleavings of acquire/release/extend across sessions keep one holder and increasing tokens', async () => {
    const SESSIONS = 3;
    const op = fc.record({
      session: fc.integer({ min: 0, max: SESSIONS - 1 }),
      kind: fc.constantFrom('acquire', 'acquire', 'impostor', 'release', 'extend', 'get'),
      name: fc.constantFrom('a', 'b', 'c'),
      waitMs: fc.constantFrom(0, 0, 20),
      // Whose token a release or extend uses, and with which key: its own last grant (no key:
      // the granting session), the current holder's with its key (a holder that reconnected),
      // the holder's without the key (a meddler that read it from lock.get), or a stale one.
      which: fc.constantFrom('own', 'own', 'holder', 'meddler', 'stale'),
    });
    const peers = await Promise.all(Array.from({ length: SESSIONS }, () => open()));
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(op, { minLength: 1, maxLength: 8 }), { minLength: 2, maxLength: 6 }),
        async (batches) => {
          run += 1;
          const names = ['a', 'b', 'c'].map((n) => `i/${run}/${n}`);
          const TTL = 2_000;
          let clock = 0; // orders sends and receipts
          const holder = new Map<string, { token: bigint; owner: string; since: number }>();
          const maxToken = new Map<string, bigint>();
          const ownerOf = new Map<bigint, string>();
          const releaseSent = new Set<bigint>();
          const releasedAt = new Map<bigint, number>(); // token -> clock of the OK reply
          const own = new Map<string, bigint>(); // `${session}:${name}` -> last token it got
          const keyOf = new Map<bigint, string>(); // token -> its lease key
          const grantedTo = new Map<bigint, Set<number>>(); // token -> sessions granted it
          const violations: string[] = [];
          const violation = (message: string) => violations.push(message);

          const onGrant = (name: string, owner: string, token: bigint, sentAt: number) => {
            const previous = ownerOf.get(token);
            if (previous !== undefined) {
              // The same lease again is fine only for its owner (idempotent re-acquire).
              if (previous !== owner)
                violation(`token ${token} granted to ${previous} and ${owner}`);
              return;
            }
            const max = maxToken.get(name) ?? 0n;
            if (token <= max) violation(`${name}: token ${token} after ${max}`);
            maxToken.set(name, token);
            ownerOf.set(token, owner);
            const current = holder.get(name);
            if (
              current &&
              !releaseSent.has(current.token) &&
              performance.now() < current.since + TTL
            ) {
              violation(`${name}: ${token} granted while ${current.token} is held`);
            }
            holder.set(name, { token, owner, since: sentAt });
          };

          for (const batch of batches) {
            const pending = batch.map(async ({ session, kind, name: short, waitMs, which }) => {
              count('interleaved');
              const name = names[['a', 'b', 'c'].indexOf(short)]!;
              const peer = peers[session]!;
              // An impostor names another session's owner, without that lease's key.
              const owner = `s${kind === 'impostor' ? (session + 1) % SESSIONS : session}`;
              const sentClock = ++clock;
              const sentAt = performance.now();
              if (kind === 'acquire' || kind === 'impostor') {
                const outcome = await peer.request('lock.acquire', {
                  name,
                  ttlMs: TTL,
                  waitMs,
                  owner,
                });
                if (outcome.reply?.result) {
                  const token = BigInt(outcome.reply.result.token);
                  const sessions = grantedTo.get(token) ?? new Set();
                  if (kind === 'impostor' && ownerOf.has(token) && !sessions.has(session)) {
                    violation(`${name}: an impostor of ${owner} was handed its lease ${token}`);
                  }
                  sessions.add(session);
                  grantedTo.set(token, sessions);
                  keyOf.set(token, outcome.reply.result.leaseKey);
                  own.set(`${session}:${name}`, token);
                  onGrant(name, owner, token, sentAt);
                } else if (outcome.reply?.error.data.code !== 'LOCK_HELD') {
                  violation(`acquire: ${JSON.stringify(outcome)}`);
                }
                return;
              }
              if (kind === 'get') {
                const outcome = await peer.request('lock.get', { name });
                if (!outcome.reply?.result) violation(`get: ${JSON.stringify(outcome)}`);
                return;
              }
              const token =
                which === 'own'
                  ? own.get(`${session}:${name}`)
                  : which === 'holder' || which === 'meddler'
                    ? holder.get(name)?.token
                    : ([...releasedAt.keys()].find((t) => ownerOf.has(t)) ?? 1n);
              if (token === undefined) return;
              const leaseKey =
                which === 'holder' || which === 'stale' ? keyOf.get(token) : undefined;
              if (kind === 'release' && (leaseKey || grantedTo.get(token)?.has(session))) {
                releaseSent.add(token);
              }
              const outcome = await peer.request(`lock.${kind}`, {
                name,
                token: String(token),
                ...(kind === 'extend' ? { ttlMs: TTL } : {}),
                ...(leaseKey ? { leaseKey } : {}),
              });
              const receivedClock = ++clock;
              const code = outcome.reply?.error?.data.code;
              if (outcome.reply?.result) {
                // Without the key, only a session that was granted the lease may (S4 for
                // non-holders that know the token).
                if (!leaseKey && !grantedTo.get(token)?.has(session)) {
                  violation(`${kind} of ${token} by session ${session} without its key succeeded`);
                }
                if (leaseKey) {
                  const sessions = grantedTo.get(token) ?? new Set();
                  if (kind === 'extend') sessions.add(session);
                  grantedTo.set(token, sessions);
                }
                // A token released before this was even sent must not work again (S4).
                const released = releasedAt.get(token);
                if (released !== undefined && released < sentClock)
                  violation(`${kind} of ${token}, released before it was sent, succeeded`);
                if (kind === 'release') {
                  releasedAt.set(token, receivedClock);
                  if (holder.get(name)?.token === token) holder.delete(name);
                } else {
                  const current = holder.get(name);
                  if (current?.token === token) current.since = sentAt;
                }
              } else if (code !== 'NOT_HOLDER') {
                violation(`${kind}: ${JSON.stringify(outcome)}`);
              }
            });
            await Promise.all(pending);
          }

          // Everything the model believes held is released; then every name must be free:
          // a grant the model never saw would still hold it.
          for (const [name, { token }] of holder) {
            const outcome = await peers[0]!.request('lock.release', {
              name,
              token: String(token),
              leaseKey: keyOf.get(token),
            });
            if (!outcome.reply?.result && outcome.reply?.error.data.code !== 'NOT_HOLDER')
              violation(`final release: ${JSON.stringify(outcome)}`);
          }
          for (const name of names) {
            const state = await peers[0]!.request('lock.get', { name });
            if (state.reply?.result?.held)
              violation(`${name} still held: ${JSON.stringify(state)}`);
          }
          for (const peer of peers) violations.push(...peer.problems);
          if (violations.length) throw new Error(violations.join('\n'));
        },
      ),
      { numRuns: INTERLEAVING_RUNS },
    );
    for (const peer of peers) await retire(peer);
    expect(problems).toEqual([]);
  });

  it(`ran at least ${10_000 * SCALE} cases, and the server is idle and its memory back afterwards`, async () => {
    console.info(
      `[fuzz] ${cases} generated cases (DLM_FUZZ_RUNS=${SCALE}): ${JSON.stringify(casesBy)}`,
    );
    expect(cases).toBeGreaterThanOrEqual(10_000 * SCALE);
    // The fuzzer's leases run out within maxTtlMs (2 s); then nothing should be left.
    const deadline = Date.now() + 10_000;
    let gauges: Record<string, number> = {};
    for (;;) {
      const text = await (
        await fetch(`${server.httpUrl}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })
      ).text();
      gauges = Object.fromEntries(
        ['dlm_sessions', 'dlm_locks_held', 'dlm_lock_waiters'].map((name) => [
          name,
          Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1]),
        ]),
      );
      if (Object.values(gauges).every((v) => v === 0) || Date.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(gauges).toEqual({ dlm_sessions: 0, dlm_locks_held: 0, dlm_lock_waiters: 0 });
    const grown = heapAfterGc() - heapBefore;
    console.info(`[fuzz] heap grew ${(grown / 2 ** 20).toFixed(1)} MiB over the run`);
    expect(grown).toBeLessThan(32 * 2 ** 20);
    expect((await fetch(`${server.httpUrl}/healthz`)).status).toBe(200);
  });
});
