import { embeddedBackend } from '@dlm/adapter-embedded';
import type { LockBackend } from '@dlm/core';
import {
  etcdAvailable,
  redisAvailable,
  redisManaged,
  startEtcd,
  startRedis,
} from '@dlm/test-services';
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type BackendConfig, createLogger, type RunningServer, startServer } from '../src/index.js';
import { openSession, type Peer } from './ws-peer.js';

// The server's spans, recorded by the OpenTelemetry SDK's in-memory exporter. The first test
// runs before any SDK is registered: the API is a no-op then, and nothing may be recorded.
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_ID = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE_ID}-${PARENT_ID}-01`;

const exporter = new InMemorySpanExporter();
let backend: LockBackend;
let server: RunningServer;
const peers: Peer[] = [];

beforeAll(async () => {
  backend = await embeddedBackend();
  server = await startServer({ port: 0, backend, logger: createLogger('error', () => {}) });
});
afterAll(async () => {
  for (const peer of peers) peer.close();
  await server.close();
  await backend.close();
  trace.disable();
});

async function session(url = server.url): Promise<Peer> {
  const peer = await openSession(url);
  peers.push(peer);
  return peer;
}

/** Runs `use` against a server on `backendConfig`; then closes the server and stops `service`. */
async function onBackend(
  service: { stop(): Promise<void> },
  backendConfig: BackendConfig,
  use: (url: string) => Promise<void>,
): Promise<void> {
  const running = await startServer({
    port: 0,
    backendConfig,
    logger: createLogger('error', () => {}),
  });
  try {
    await use(running.url);
  } finally {
    await running.close();
    await service.stop();
  }
}

/** Sends `method` as part of the caller's trace (TRACEPARENT). */
const traced = (peer: Peer, method: string, params: Record<string, unknown>) =>
  peer.call(method, { ...params, traceparent: TRACEPARENT });

function register(): void {
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  expect(trace.setGlobalTracerProvider(provider)).toBe(true);
}

const spans = (name: string) => exporter.getFinishedSpans().filter((span) => span.name === name);
const childrenOf = (parent: ReadableSpan) =>
  exporter
    .getFinishedSpans()
    .filter((span) => span.parentSpanContext?.spanId === parent.spanContext().spanId);

function only(list: ReadableSpan[]): ReadableSpan {
  expect(list).toHaveLength(1);
  return list[0]!;
}

describe('without an OpenTelemetry SDK', () => {
  it('serves requests with a traceparent and records nothing, not even once an SDK comes', async () => {
    const peer = await session();
    const { result } = await traced(peer, 'lock.acquire', { name: 'untraced', ttlMs: 5_000 });
    expect(result.token).toMatch(/^\d+$/);
    await peer.call('lock.release', { name: 'untraced', token: result.token });
    register();
    expect(exporter.getFinishedSpans()).toEqual([]);
  });
});

describe('with an SDK registered', () => {
  beforeEach(() => exporter.reset());

  it("an acquire's span joins the caller's trace, with its backend call as a child span", async () => {
    const peer = await session();
    const { result } = await traced(peer, 'lock.acquire', { name: 'traced', ttlMs: 5_000 });
    const acquire = only(spans('lock.acquire'));
    expect(acquire.kind).toBe(SpanKind.SERVER);
    expect(acquire.spanContext().traceId).toBe(TRACE_ID);
    expect(acquire.parentSpanContext?.spanId).toBe(PARENT_ID);
    expect(acquire.attributes).toMatchObject({
      'rpc.system': 'jsonrpc',
      'rpc.method': 'lock.acquire',
      'dlm.backend.kind': 'embedded',
      'dlm.lock.name': 'traced',
      'dlm.lock.ttl_ms': 5_000,
      'dlm.lock.wait_ms': 0,
      'dlm.lock.queue_position': 0,
      'dlm.lock.token': result.token,
      'dlm.outcome': 'granted',
    });
    expect(acquire.attributes['dlm.lock.waited_ms']).toBeGreaterThanOrEqual(0);
    expect(acquire.status.code).toBe(SpanStatusCode.UNSET);
    const [call] = childrenOf(acquire);
    expect(childrenOf(acquire)).toHaveLength(1);
    expect(call!.name).toBe('backend.tryAcquire');
    expect(call!.kind).toBe(SpanKind.CLIENT);
    expect(call!.spanContext().traceId).toBe(TRACE_ID);
    expect(call!.attributes).toMatchObject({
      'dlm.backend.kind': 'embedded',
      'dlm.backend.operation': 'tryAcquire',
    });

    await traced(peer, 'lock.extend', { name: 'traced', token: result.token, ttlMs: 6_000 });
    const extend = only(spans('lock.extend'));
    expect(extend.attributes).toMatchObject({
      'dlm.outcome': 'extended',
      'dlm.lock.ttl_ms': 6_000,
    });
    expect(childrenOf(extend).map((span) => span.name)).toEqual(['backend.extend']);

    await peer.call('lock.release', { name: 'traced', token: result.token });
    const release = only(spans('lock.release'));
    // No traceparent: a trace of its own.
    expect(release.parentSpanContext).toBeUndefined();
    expect(release.spanContext().traceId).not.toBe(TRACE_ID);
    expect(release.attributes).toMatchObject({
      'dlm.outcome': 'released',
      'dlm.lock.token': result.token,
    });
    expect(childrenOf(release).map((span) => span.name)).toEqual(['backend.release']);
  });

  it("a wait's span tells its queue position on arrival, and its retries are its own children", async () => {
    const holder = await session();
    const first = await session();
    const second = await session();
    const held = (await holder.call('lock.acquire', { name: 'queue', ttlMs: 10_000 })).result;
    // Each waiter is queued before the next one is sent: a get on its connection is answered
    // after its acquire has joined the queue.
    const queue = async (peer: Peer, owner: string) => {
      const wait = peer.call('lock.acquire', {
        name: 'queue',
        ttlMs: 10_000,
        waitMs: 10_000,
        owner,
      });
      await peer.call('lock.get', { name: 'queue' });
      // In an object: an async function returning the promise itself would wait for the grant.
      return { wait };
    };
    const { wait: firstWait } = await queue(first, 'first');
    const { wait: secondWait } = await queue(second, 'second');
    await holder.call('lock.release', { name: 'queue', token: held.token });
    const granted = (await firstWait).result;
    await first.call('lock.release', { name: 'queue', token: granted.token });
    await secondWait;

    const waits = spans('lock.acquire').filter(
      (span) => span.attributes['dlm.lock.wait_ms'] === 10_000,
    );
    expect(waits).toHaveLength(2);
    const firstSpan = only(
      waits.filter((span) => span.attributes['dlm.lock.token'] === granted.token),
    );
    const secondSpan = only(waits.filter((span) => span !== firstSpan));
    expect(firstSpan.attributes['dlm.lock.queue_position']).toBe(0);
    expect(secondSpan.attributes['dlm.lock.queue_position']).toBe(1);
    expect(firstSpan.attributes['dlm.outcome']).toBe('granted');
    // A try on arrival (held), again when the queue was served for the second's arrival, and
    // once more when the release woke it: each one the waiter's own child span.
    const tries = childrenOf(firstSpan).map((span) => span.name);
    expect(tries.length).toBeGreaterThanOrEqual(2);
    expect(new Set(tries)).toEqual(new Set(['backend.tryAcquire']));
    // Every backend call belongs to the request it was made for: none is left without a parent.
    const requestIds = new Set(
      exporter
        .getFinishedSpans()
        .filter((span) => span.name.startsWith('lock.'))
        .map((span) => span.spanContext().spanId),
    );
    for (const call of exporter.getFinishedSpans().filter((s) => s.name.startsWith('backend.'))) {
      expect(requestIds).toContain(call.parentSpanContext?.spanId);
    }
    // The waiter's retry was made while serving the holder's release, yet it is not the
    // release's: the release's span has its own backend call only.
    const releases = spans('lock.release').filter(
      (span) => span.attributes['dlm.lock.token'] === held.token,
    );
    expect(childrenOf(only(releases)).map((span) => span.name)).toEqual(['backend.release']);
  });

  it('a refused try-lock is an outcome, not a server error; a bad traceparent starts a new trace', async () => {
    const holder = await session();
    const other = await session();
    const held = (await holder.call('lock.acquire', { name: 'busy', ttlMs: 10_000 })).result;
    const refused = await other.call('lock.acquire', {
      name: 'busy',
      ttlMs: 10_000,
      traceparent: `00-${'0'.repeat(32)}-${PARENT_ID}-01`,
    });
    expect(refused.error.data.code).toBe('LOCK_HELD');
    const span = only(
      spans('lock.acquire').filter((s) => s.attributes['dlm.outcome'] !== 'granted'),
    );
    expect(span.attributes).toMatchObject({
      'dlm.outcome': 'LOCK_HELD',
      'error.type': 'LOCK_HELD',
    });
    expect(span.status.code).toBe(SpanStatusCode.UNSET);
    expect(span.parentSpanContext).toBeUndefined();
    expect(span.spanContext().traceId).not.toBe('0'.repeat(32));
    await holder.call('lock.release', { name: 'busy', token: held.token });
  });

  it("an acquireAll's span names its set and tokens in request order, its backend calls as children", async () => {
    const peer = await session();
    const locks = [{ name: 'traced-all/b' }, { name: 'traced-all/a' }];
    const { result } = await traced(peer, 'lock.acquireAll', { locks, ttlMs: 5_000 });
    const span = only(spans('lock.acquireAll'));
    expect(span.spanContext().traceId).toBe(TRACE_ID);
    expect(span.attributes).toMatchObject({
      'rpc.method': 'lock.acquireAll',
      'dlm.lock.names': ['traced-all/b', 'traced-all/a'],
      'dlm.lock.count': 2,
      'dlm.lock.ttl_ms': 5_000,
      'dlm.lock.wait_ms': 0,
      'dlm.lock.tokens': result.grants.map((grant: { token: string }) => grant.token),
      'dlm.outcome': 'granted',
    });
    expect(childrenOf(span).map((child) => child.name)).toEqual([
      'backend.tryAcquire',
      'backend.tryAcquire',
    ]);
    for (const grant of result.grants) {
      await peer.call('lock.release', { name: grant.name, token: grant.token });
    }
  });

  it('bad params end the span with INVALID_PARAMS before any backend call', async () => {
    const peer = await session();
    const reply = await peer.call('lock.acquire', { name: '', ttlMs: 5_000 });
    expect(reply.error.data.code).toBe('INVALID_PARAMS');
    const span = only(spans('lock.acquire'));
    expect(span.attributes['dlm.outcome']).toBe('INVALID_PARAMS');
    expect(childrenOf(span)).toEqual([]);
  });

  describe.runIf(redisAvailable())('on Redis', () => {
    it("an acquire's backend call on Redis is a child span in the caller's trace; with Redis gone both are errors", async () => {
      const redis = await startRedis();
      await onBackend(redis, { kind: 'redis', url: redis.url }, async (url) => {
        const peer = await session(url);
        const { result } = await traced(peer, 'lock.acquire', { name: 'on-redis', ttlMs: 5_000 });
        await traced(peer, 'lock.release', { name: 'on-redis', token: result.token });
        const acquire = only(spans('lock.acquire'));
        expect(acquire.spanContext().traceId).toBe(TRACE_ID);
        expect(acquire.attributes['dlm.backend.kind']).toBe('redis');
        const [call] = childrenOf(acquire);
        expect(call?.name).toBe('backend.tryAcquire');
        expect(call?.attributes['dlm.backend.kind']).toBe('redis');
        expect(call?.spanContext().traceId).toBe(TRACE_ID);
        expect(childrenOf(only(spans('lock.release'))).map((span) => span.name)).toEqual([
          'backend.release',
        ]);
        if (!redisManaged()) return;
        // With Redis gone, the acquire and its backend call are errors: a fault, not an answer.
        exporter.reset();
        await redis.kill();
        const down = await peer.call('lock.acquire', { name: 'on-redis', ttlMs: 5_000 });
        expect(down.error.data.code).toBe('UNAVAILABLE');
        const failed = only(spans('lock.acquire'));
        expect(failed.status.code).toBe(SpanStatusCode.ERROR);
        expect(failed.attributes).toMatchObject({
          'dlm.outcome': 'UNAVAILABLE',
          'error.type': 'UNAVAILABLE',
        });
        const [failedCall] = childrenOf(failed);
        expect(failedCall?.name).toBe('backend.tryAcquire');
        expect(failedCall?.status.code).toBe(SpanStatusCode.ERROR);
      });
    });
  });

  describe.runIf(etcdAvailable())('on etcd (a backend with its own fair queue)', () => {
    it("a wait in etcd's queue is one backend.acquireQueued child span, in the caller's trace", async () => {
      const etcd = await startEtcd();
      await onBackend(etcd, { kind: 'etcd', endpoints: etcd.endpoints }, async (url) => {
        const holder = await session(url);
        const waiter = await session(url);
        const held = (await holder.call('lock.acquire', { name: 'on-etcd', ttlMs: 5_000 })).result;
        const wait = traced(waiter, 'lock.acquire', {
          name: 'on-etcd',
          ttlMs: 5_000,
          waitMs: 10_000,
        });
        await waiter.call('lock.get', { name: 'on-etcd' });
        await holder.call('lock.release', { name: 'on-etcd', token: held.token });
        const granted = (await wait).result;
        await waiter.call('lock.release', { name: 'on-etcd', token: granted.token });
        const acquire = only(
          spans('lock.acquire').filter((span) => span.spanContext().traceId === TRACE_ID),
        );
        expect(acquire.attributes).toMatchObject({
          'dlm.backend.kind': 'etcd',
          'dlm.lock.queue_position': 0,
          'dlm.outcome': 'granted',
        });
        const [call] = childrenOf(acquire);
        expect(childrenOf(acquire)).toHaveLength(1);
        expect(call?.name).toBe('backend.acquireQueued');
        expect(call?.spanContext().traceId).toBe(TRACE_ID);
      });
    });
  });
});
