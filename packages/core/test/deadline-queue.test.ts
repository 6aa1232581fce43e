import { describe, expect, it } from 'vitest';
import { type Clock, createManualClock } from '../src/clock.js';
import { createDeadlineQueue } from '../src/deadline-queue.js';

/** A manual clock that also counts the timers armed and still pending. */
function countingClock() {
  const clock = createManualClock();
  let pending = 0;
  const counted: Clock = {
    now: clock.now,
    setTimer(callback, delayMs) {
      pending += 1;
      let live = true;
      const timer = clock.setTimer(() => {
        live = false;
        pending -= 1;
        callback();
      }, delayMs);
      return {
        cancel() {
          if (live) pending -= 1;
          live = false;
          timer.cancel();
        },
      };
    },
  };
  return { clock: counted, advance: clock.advance, pending: () => pending };
}

describe('createDeadlineQueue', () => {
  it('expires entries in the order added, each delayMs after it was added', () => {
    const { clock, advance } = countingClock();
    const queue = createDeadlineQueue(clock, 100);
    const fired: Array<[string, number]> = [];
    queue.add(() => fired.push(['a', clock.now()]));
    advance(30);
    queue.add(() => fired.push(['b', clock.now()]));
    advance(69);
    expect(fired).toEqual([]);
    advance(1);
    expect(fired).toEqual([['a', 100]]);
    advance(30);
    expect(fired).toEqual([
      ['a', 100],
      ['b', 130],
    ]);
  });

  it('never calls a removed entry, from the front, the middle or the back', () => {
    const { clock, advance } = countingClock();
    const queue = createDeadlineQueue(clock, 50);
    const fired: string[] = [];
    const removers = ['a', 'b', 'c', 'd', 'e'].map((name) => queue.add(() => fired.push(name)));
    removers[0]!();
    removers[2]!();
    removers[4]!();
    removers[2]!(); // twice is harmless
    advance(50);
    expect(fired).toEqual(['b', 'd']);
  });

  it('leaves no timer behind once nothing is pending, and re-arms for new entries', () => {
    const { clock, advance, pending } = countingClock();
    const queue = createDeadlineQueue(clock, 1_000);
    const removeA = queue.add(() => {});
    const removeB = queue.add(() => {});
    expect(pending()).toBe(1);
    removeA();
    expect(pending()).toBe(1);
    removeB();
    expect(pending()).toBe(0);
    let fired = 0;
    queue.add(() => fired++);
    expect(pending()).toBe(1);
    advance(1_000);
    expect(fired).toBe(1);
    expect(pending()).toBe(0);
  });

  it('keeps expiring the others when one entry throws', () => {
    const { clock, advance } = countingClock();
    const queue = createDeadlineQueue(clock, 10);
    const fired: string[] = [];
    queue.add(() => {
      throw new Error('boom');
    });
    queue.add(() => fired.push('second'));
    advance(10);
    expect(fired).toEqual(['second']);
  });

  it('puts an entry with its own delay in deadline order, re-arming for an earlier one', () => {
    const { clock, advance, pending } = countingClock();
    const queue = createDeadlineQueue(clock, 100);
    const fired: Array<[string, number]> = [];
    const at = (name: string) => () => fired.push([name, clock.now()]);
    queue.add(at('default-100'));
    queue.add(at('late-300'), 300);
    queue.add(at('early-20'), 20);
    queue.add(at('tie-100'), 100);
    const removeMiddle = queue.add(at('removed-50'), 50);
    removeMiddle();
    expect(pending()).toBe(1);
    advance(20);
    expect(fired).toEqual([['early-20', 20]]);
    advance(80);
    expect(fired.map(([name]) => name)).toEqual(['early-20', 'default-100', 'tie-100']);
    advance(200);
    expect(fired.at(-1)).toEqual(['late-300', 300]);
    expect(pending()).toBe(0);
  });
});
