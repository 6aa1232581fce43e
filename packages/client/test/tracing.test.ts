import { parseTraceparent } from '@dlm/protocol';
import { createLogger } from '@dlm/server';
import { context, SpanKind, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createClient, type DlmClient } from '../src/index.js';
import { eventually, failOnUnhandledRejections, lockName, useServer } from './support.js';

failOnUnhandledRejections();

// A client and a real server in one process, both traced by one SDK with an in-memory exporter:
// the application's span, the client's acquire span, the server's acquire span and its backend
// calls must form one trace. The first test runs before any SDK is registered.
const exporter = new InMemorySpanExporter();
const sent: Array<Record<string, any>> = [];

class RecordingWebSocket extends WebSocket {
  override send(data: unknown, ...rest: unknown[]): void {
    sent.push(JSON.parse(String(data)) as Record<string, any>);
    (super.send as (...args: unknown[]) => void)(data, ...rest);
  }
}

const served = useServer({ logger: createLogger('error', () => {}) });
let client: DlmClient;

beforeAll(async () => {
  client = createClient({
    url: served.server.url,
    WebSocket: RecordingWebSocket as unknown as NonNullable<
      Parameters<typeof createClient>[0]['WebSocket']
    >,
  });
});
afterAll(async () => {
  await client.close();
  trace.disable();
  context.disable();
});

const finished = () => exporter.getFinishedSpans();
const named = (name: string, kind: SpanKind) =>
  finished().filter((span) => span.name === name && span.kind === kind);
const parentOf = (span: ReadableSpan) =>
  finished().find((other) => other.spanContext().spanId === span.parentSpanContext?.spanId);
const sentFor = (method: string, name: string) =>
  sent.filter((frame) => frame.method === method && frame.params?.name === name);

function only<T>(list: T[]): T {
  expect(list).toHaveLength(1);
  return list[0]!;
}

describe('without an OpenTelemetry SDK', () => {
  it('sends no traceparent and nothing is recorded', async () => {
    const name = lockName('untraced');
    const lease = await client.acquire(name, { ttlMs: 5_000 });
    await lease.release();
    expect(sentFor('lock.acquire', name)).toHaveLength(1);
    for (const frame of sent) expect(frame.params?.traceparent).toBeUndefined();
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(
      new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }),
    );
    expect(finished()).toEqual([]);
  });
});

describe('with an SDK registered', () => {
  beforeEach(() => exporter.reset());

  it("the application's span, the client's acquire, the server's acquire and its backend calls are one trace", async () => {
    const name = lockName('one-trace');
    const tracer = trace.getTracer('test-app');
    const holder = await client.acquire(name, { ttlMs: 10_000 });
    exporter.reset();
    let jobTrace = '';
    const waited = tracer.startActiveSpan('handle-job', async (job) => {
      jobTrace = job.spanContext().traceId;
      try {
        const lease = await client.acquire(name, { ttlMs: 5_000, waitMs: 5_000 });
        await lease.release();
        return lease.token;
      } finally {
        job.end();
      }
    });
    // Queued on the server: its first try (held) has ended, in the job's trace.
    await eventually(() =>
      finished().some(
        (span) => span.name === 'backend.tryAcquire' && span.spanContext().traceId === jobTrace,
      ),
    );
    await holder.release();
    const token = await waited;

    const job = only(finished().filter((span) => span.name === 'handle-job'));
    const traceId = job.spanContext().traceId;
    const clientSpan = only(named('lock.acquire', SpanKind.CLIENT));
    const serverSpan = only(
      named('lock.acquire', SpanKind.SERVER).filter(
        (span) => span.spanContext().traceId === traceId,
      ),
    );
    expect(parentOf(clientSpan)).toBe(job);
    expect(parentOf(serverSpan)).toBe(clientSpan);
    expect(serverSpan.parentSpanContext?.isRemote).toBe(true);
    const calls = finished().filter((span) => parentOf(span) === serverSpan);
    // The try on arrival (held) and the one the release woke.
    expect(calls.length).toBeGreaterThanOrEqual(2);
    for (const call of calls) {
      expect(call.name).toBe('backend.tryAcquire');
      expect(call.spanContext().traceId).toBe(traceId);
    }
    expect(clientSpan.attributes).toMatchObject({
      'rpc.system': 'jsonrpc',
      'rpc.method': 'lock.acquire',
      'dlm.lock.name': name,
      'dlm.lock.ttl_ms': 5_000,
      'dlm.lock.wait_ms': 5_000,
      'dlm.lock.token': token.toString(),
      'dlm.outcome': 'granted',
    });
    expect(serverSpan.attributes).toMatchObject({
      'dlm.lock.queue_position': 0,
      'dlm.outcome': 'granted',
      'dlm.lock.token': token.toString(),
    });
    // What went over the wire: the client span's context, on every try.
    const frames = sentFor('lock.acquire', name).slice(1);
    expect(frames.length).toBeGreaterThanOrEqual(1);
    for (const frame of frames) {
      expect(parseTraceparent(frame.params.traceparent)).toEqual({
        traceId,
        parentId: clientSpan.spanContext().spanId,
        flags: 1,
      });
    }
    // The release, made in the application's span, is a child of it (no client span of its own).
    const release = only(
      named('lock.release', SpanKind.SERVER).filter(
        (span) => span.spanContext().traceId === traceId,
      ),
    );
    expect(parentOf(release)).toBe(job);
  });

  it('a refused try-lock ends the client span with its code', async () => {
    const name = lockName('refused');
    const holder = await client.acquire(name, { ttlMs: 5_000 });
    exporter.reset();
    await expect(client.tryAcquire(name, { ttlMs: 5_000 })).resolves.toBeNull();
    const clientSpan = only(named('lock.acquire', SpanKind.CLIENT));
    expect(clientSpan.attributes).toMatchObject({
      'dlm.outcome': 'LOCK_HELD',
      'error.type': 'LOCK_HELD',
    });
    await holder.release();
  });

  it("a background renewal is no request's: its extend starts a trace of its own", async () => {
    const name = lockName('renewal');
    const tracer = trace.getTracer('test-app');
    const lease = await tracer.startActiveSpan('start-work', async (span) => {
      try {
        return await client.acquire(name, { ttlMs: 300, autoExtend: true });
      } finally {
        span.end();
      }
    });
    await eventually(() => named('lock.extend', SpanKind.SERVER).length > 0);
    await lease.release();
    const start = only(finished().filter((span) => span.name === 'start-work'));
    for (const extend of named('lock.extend', SpanKind.SERVER)) {
      expect(extend.parentSpanContext).toBeUndefined();
      expect(extend.spanContext().traceId).not.toBe(start.spanContext().traceId);
    }
  });
});
