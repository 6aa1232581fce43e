import {
  type BackendCapabilities,
  createLockService,
  type DlmError,
  isDlmError,
  type Lease,
  type LockBackend,
} from '@dlm/core';
import { expect } from 'vitest';
import type { ConformanceContext } from './context.js';

/** What a test context offers to skip itself (vitest's `context.skip`). */
export interface Skippable {
  skip(note?: string): never;
}

/** A group's test body: this test's context, and its skip for capability gates. */
export type TestBody = (ctx: ConformanceContext, test: Skippable) => Promise<void>;

/**
 * The test function for `it` that runs `body` with the group's context, so that a group reads
 * as a list of `it(name, withContext(ctx, body))` lines.
 */
export function withContext(
  ctx: ConformanceContext,
  body: TestBody,
): (test: Skippable) => Promise<void> {
  return (test) => body(ctx, test);
}

let unique = 0;
/** Each test uses its own names, so suites never need to flush the backend. */
export function lockName(label: string): string {
  unique += 1;
  return `conformance/${label}/${process.pid}-${Date.now().toString(36)}-${unique}`;
}

/** The DlmError `promise` rejects with; anything else (or success) fails the test. */
export async function failure(promise: Promise<unknown>): Promise<DlmError> {
  try {
    await promise;
  } catch (error) {
    if (isDlmError(error)) return error;
    throw error;
  }
  throw new Error('expected the call to fail, but it succeeded');
}

/** The shortest lease worth testing expiry with, on this backend's granularity. */
export function shortTtl(caps: BackendCapabilities): number {
  const wanted = Math.max(caps.minTtlMs, 300);
  return Math.ceil(wanted / caps.ttlGranularityMs) * caps.ttlGranularityMs;
}

/** How long after a lease's end a backend may still need to notice it ended. */
export function expirySlack(caps: BackendCapabilities): number {
  return caps.ttlGranularityMs + 1_500;
}

/**
 * Whether the suite runs through a transport whose caller hears no `lock.lost` and no watch
 * events (a door without a session): the tests of those are skipped there.
 */
export function withoutNotifications(ctx: ConformanceContext): boolean {
  return ctx.target.transport !== undefined && !ctx.target.transport.notifications;
}

/**
 * A wait through a dlm server of its own over `backend`: core's one wait loop over the
 * backend's queue driver (or this server's FIFO), long enough never to run out in a test. For a
 * backend package's tests of its queue; a signal ends it with CANCELLED.
 */
export function waitThrough(
  backend: LockBackend,
  { signal, ...lock }: { name: string; owner: string; ttlMs?: number; signal?: AbortSignal },
): Promise<Lease> {
  return createLockService({ backend }).acquire({
    ttlMs: 10_000,
    ...lock,
    waitMs: 60_000,
    ...(signal ? { signal } : {}),
  });
}

/**
 * A backend opened while its store refuses connections: `ready()` fails UNAVAILABLE, and three
 * acquires together fail within 500 ms (not the whole command time-out each), each UNAVAILABLE
 * with `message` (the store named, and that it reconnects). Returns their errors for the
 * adapter's own checks.
 */
export async function expectRefusedAtOnce(
  backend: LockBackend & { ready(): Promise<void> },
  message: RegExp,
): Promise<DlmError[]> {
  // The server awaits ready() at start and goes on without it: it fails on the refusal.
  expect((await failure(backend.ready())).code).toBe('UNAVAILABLE');
  const started = performance.now();
  const errors = await Promise.all(
    [1, 2, 3].map((n) =>
      failure(backend.tryAcquire({ name: lockName('cold'), owner: `o${n}`, ttlMs: 5_000 })),
    ),
  );
  expect(performance.now() - started).toBeLessThan(500);
  for (const error of errors) {
    expect(error.code).toBe('UNAVAILABLE');
    expect(error.message).toMatch(message);
  }
  return errors;
}

/**
 * `name` is free but in its lock-delay as `backend` sees it: a try-lock of either mode (shared
 * with limit 3) is refused with `lockDelayRemainingMs` in (`atLeastMs`, `atMostMs`]. For a backend
 * package's tests of where it keeps the delay.
 */
export async function expectDelayedTryLocks(
  backend: LockBackend,
  name: string,
  { atLeastMs, atMostMs }: { atLeastMs: number; atMostMs: number },
): Promise<void> {
  for (const mode of ['exclusive', 'shared'] as const) {
    const result = await backend.tryAcquire({
      name,
      owner: 'b',
      ttlMs: 5_000,
      mode,
      ...(mode === 'shared' ? { limit: 3 } : {}),
    });
    expect(result.granted, `a ${mode} try-lock in the delay`).toBe(false);
    const left = result.granted ? 0 : (result.lockDelayRemainingMs ?? 0);
    expect(left).toBeGreaterThan(atLeastMs);
    expect(left).toBeLessThanOrEqual(atMostMs);
  }
}
