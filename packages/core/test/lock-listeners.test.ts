import { describe, expect, it } from 'vitest';
import type { LockEvent } from '../src/backend.js';
import { holderChangeEvents, type ListenerEntry, LockListeners } from '../src/lock-listeners.js';

interface Entry extends ListenerEntry {
  note: number;
}

function listeners(dropped: Entry[] = []) {
  return new LockListeners<Entry>({
    create: (name) => ({ name, listeners: new Set(), note: 0 }),
    dropped: (entry) => dropped.push(entry),
  });
}

describe('LockListeners', () => {
  it('the same function watched twice is two subscriptions, each unsubscribed on its own', () => {
    const map = listeners();
    const heard: LockEvent[] = [];
    const listener = (event: LockEvent) => heard.push(event);
    const first = map.watch('a', listener);
    map.watch('a', listener);
    map.deliver('a', { name: 'a', type: 'released' });
    expect(heard).toHaveLength(2);
    first();
    map.deliver('a', { name: 'a', type: 'released' });
    expect(heard).toHaveLength(3);
  });

  it("drops a name's entry with its last watcher, and a late look at it is no longer current", () => {
    const dropped: Entry[] = [];
    const map = listeners(dropped);
    const stop = map.watch('a', () => {});
    const entry = map.get('a')!;
    expect(map.isCurrent(entry)).toBe(true);
    stop();
    expect(dropped).toEqual([entry]);
    expect(map.isCurrent(entry)).toBe(false);
    expect(map.names()).toEqual([]);
  });

  it("one listener's failure does not starve the others", () => {
    const map = listeners();
    const heard: string[] = [];
    map.watch('a', () => {
      throw new Error('boom');
    });
    map.watch('a', (event) => heard.push(event.type));
    map.deliver('a', { name: 'a', type: 'revoked' });
    expect(heard).toEqual(['revoked']);
  });
});

describe('holderChangeEvents', () => {
  it('says nothing for the same lease, and expiry then grant for a new one', () => {
    expect(holderChangeEvents('a', { token: 1n }, { token: 1n, owner: 'o' }, true)).toEqual([]);
    expect(
      holderChangeEvents('a', { token: 1n, owner: 'o' }, { token: 2n, owner: 'p' }, false),
    ).toEqual([
      { name: 'a', type: 'expired', token: 1n, owner: 'o' },
      { name: 'a', type: 'acquired', token: 2n, owner: 'p' },
    ]);
  });

  it('wakes the watchers of a name that was and is free only when asked to', () => {
    expect(holderChangeEvents('a', undefined, undefined, true)).toEqual([
      { name: 'a', type: 'released' },
    ]);
    expect(holderChangeEvents('a', undefined, undefined, false)).toEqual([]);
    expect(holderChangeEvents('a', { token: 3n }, undefined, true)).toEqual([
      { name: 'a', type: 'expired', token: 3n },
    ]);
  });
});
