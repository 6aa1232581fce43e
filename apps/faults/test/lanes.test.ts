import { describe, expect, it } from 'vitest';
import { inLanes } from '../src/campaign.js';

describe('inLanes', () => {
  it('runs at most `lanes` items at once and returns the results in the items order', async () => {
    let running = 0;
    let most = 0;
    const started: number[] = [];
    const results = await inLanes([30, 5, 20, 1, 10], 2, async (delayMs, index) => {
      started.push(index);
      running += 1;
      most = Math.max(most, running);
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      running -= 1;
      return delayMs * 2;
    });
    expect(results).toEqual([60, 10, 40, 2, 20]);
    expect(most).toBe(2);
    // Items start in their order: a free lane takes the next one.
    expect(started).toEqual([0, 1, 2, 3, 4]);
  });

  it('runs one at a time with one lane, and copes with fewer items than lanes', async () => {
    let running = 0;
    let most = 0;
    const results = await inLanes(['a', 'b', 'c'], 1, async (item) => {
      running += 1;
      most = Math.max(most, running);
      await new Promise((resolve) => setImmediate(resolve));
      running -= 1;
      return item.toUpperCase();
    });
    expect(results).toEqual(['A', 'B', 'C']);
    expect(most).toBe(1);
    expect(await inLanes([1], 8, async (n) => n + 1)).toEqual([2]);
    expect(await inLanes([], 3, async (n: number) => n)).toEqual([]);
  });
});
