import { describe, expect, it } from 'vitest';
import { pendingAfter } from '../src/index.js';

describe('pendingAfter', () => {
  it('is true for a promise that settles only later, false for one that fulfils or rejects first', async () => {
    let resolveLater!: () => void;
    const later = new Promise<void>((resolve) => {
      resolveLater = resolve;
    });
    expect(await pendingAfter(later, 30)).toBe(true);
    resolveLater();
    expect(await pendingAfter(later, 30)).toBe(false);
    expect(await pendingAfter(Promise.reject(new Error('refused')), 30)).toBe(false);
  });
});
