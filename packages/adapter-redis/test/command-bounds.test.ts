import { createDeadlineQueue, createManualClock, isDlmError } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { bounded } from '../src/command-bounds.js';

// The queue itself (order, out-of-order delays, cancel anywhere, re-arm) is core's and is
// tested there (packages/core/test/deadline-queue.test.ts).
describe('shared deadlines (one timer for every call in flight)', () => {
  it('bounded() with shared deadlines rejects UNAVAILABLE (indeterminate for writes) on time', async () => {
    const clock = createManualClock();
    const deadlines = createDeadlineQueue(clock, 50);
    const never = () => new Promise<never>(() => {});
    const write = bounded({ clock, timeoutMs: 50, deadlines }, 'acquire', true, never);
    const read = bounded({ clock, timeoutMs: 80, deadlines }, 'inspect', false, never);
    const quick = bounded({ clock, timeoutMs: 50, deadlines }, 'release', true, async () => 1);
    await expect(quick).resolves.toBe(1);
    clock.advance(50);
    const writeError = await write.catch((error: unknown) => error);
    expect(isDlmError(writeError) && writeError.code).toBe('UNAVAILABLE');
    expect(isDlmError(writeError) && writeError.details?.indeterminate).toBe(true);
    clock.advance(30);
    const readError = await read.catch((error: unknown) => error);
    expect(isDlmError(readError) && readError.code).toBe('UNAVAILABLE');
  });
});
