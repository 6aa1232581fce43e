import { describe, expect, it } from 'vitest';
import { createSkewClock } from '../src/skew-clock.js';

describe('skewable clock', () => {
  it('a forward jump fires the timers that fall due, at once', () => {
    let real = 0;
    const clock = createSkewClock(() => real);
    const fired: string[] = [];
    clock.setTimer(() => fired.push('soon'), 1_000);
    clock.setTimer(() => fired.push('later'), 10_000);
    return new Promise<void>((resolve) => {
      clock.jump(5_000);
      expect(clock.now()).toBe(5_000);
      setTimeout(() => {
        expect(fired).toEqual(['soon']);
        real = 0;
        resolve();
      }, 20);
    });
  });

  it('runs at another rate, and a stopped clock fires nothing', async () => {
    let real = 0;
    const clock = createSkewClock(() => real);
    clock.setRate(2);
    real = 100;
    expect(clock.now()).toBe(200);
    clock.setRate(0);
    real = 1_000;
    expect(clock.now()).toBe(200);
    let fired = false;
    clock.setTimer(() => {
      fired = true;
    }, 1);
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(fired).toBe(false);
    clock.setRate(1);
    real = 1_010; // 10 ms later the timer (due at 201) is 9 ms late: it fires at the next turn
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(fired).toBe(true);
    expect(() => clock.jump(-1)).toThrow(RangeError);
  });

  it('with the real clock, timers follow a 4× rate', async () => {
    const clock = createSkewClock();
    clock.setRate(4);
    const started = performance.now();
    await new Promise<void>((resolve) => clock.setTimer(resolve, 400));
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(90);
    expect(elapsed).toBeLessThan(350);
  });
});
