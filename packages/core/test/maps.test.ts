import { describe, expect, it } from 'vitest';
import { getOrCreate } from '../src/index.js';

describe('getOrCreate', () => {
  it('stores what create makes on the first lookup and returns that same value afterwards', () => {
    const map = new Map<string, string[]>();
    let made = 0;
    const create = () => {
      made += 1;
      return [];
    };
    const first = getOrCreate(map, 'a', create);
    first.push('x');
    expect(getOrCreate(map, 'a', create)).toBe(first);
    expect(map.get('a')).toEqual(['x']);
    expect(made).toBe(1);
  });

  it('keeps a stored falsy value instead of making a new one, and fills a WeakMap too', () => {
    const counts = new Map<string, number>([['zero', 0]]);
    expect(getOrCreate(counts, 'zero', () => 7)).toBe(0);
    const key = {};
    const weak = new WeakMap<object, Set<number>>();
    getOrCreate(weak, key, () => new Set()).add(1);
    expect(weak.get(key)).toEqual(new Set([1]));
  });
});
