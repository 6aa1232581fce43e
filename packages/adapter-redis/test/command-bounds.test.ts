import { createManualClock, isDlmError } from '@dlm/core';
import { describe, expect, it } from 'vitest';
import { bounded, createDeadlines } from '../src/command-bounds.js';

describe('shared deadlines (one timer for every call in flight)', () => {
  it('fires each deadline at its time, in deadline order, even when added out of order', () => {
    const clock = createManualClock();
    const deadlines = createDeadlines(clock);
    const fired: string[] = [];
    deadlines.add(300, () => fired.push('c'));
    deadlines.add(100, () => fired.push('a'));
    deadlines.add(200, () => fired.push('b'));
    deadlines.add(100, () => fired.push('a2'));
    clock.advance(99);
    expect(fired).toEqual([]);
    clock.advance(1);
    expect(fired).toEqual(['a', 'a2']);
    clock.advance(100);
    expect(fired).toEqual(['a', 'a2', 'b']);
    clock.advance(100);
    expect(fired).toEqual(['a', 'a2', 'b', 'c']);
  });

  it('a cancelled deadline never fires, wherever it is in the queue', () => {
    const clock = createManualClock();
    const deadlines = createDeadlines(clock);
    const fired: string[] = [];
    const first = deadlines.add(100, () => fired.push('first'));
    const middle = deadlines.add(150, () => fired.push('middle'));
    deadlines.add(200, () => fired.push('last'));
    middle.cancel();
    first.cancel();
    first.cancel();
    clock.advance(150);
    expect(fired).toEqual([]);
    clock.advance(50);
    expect(fired).toEqual(['last']);
  });

  it('a deadline added after the queue emptied is served by a new timer', () => {
    const clock = createManualClock();
    const deadlines = createDeadlines(clock);
    const fired: number[] = [];
    deadlines.add(10, () => fired.push(1)).cancel();
    clock.advance(20);
    deadlines.add(10, () => fired.push(2));
    clock.advance(10);
    expect(fired).toEqual([2]);
  });

  it('bounded() with shared deadlines rejects UNAVAILABLE (indeterminate for writes) on time', async () => {
    const clock = createManualClock();
    const deadlines = createDeadlines(clock);
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
