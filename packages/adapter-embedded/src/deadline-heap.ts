import type { Lease } from './lease.js';

/**
 * A binary min-heap of leases ordered by deadline, so one timer (for the earliest deadline)
 * serves every held lock. Each lease records its own index, so an extend or a release moves or
 * removes it in O(log n) and the heap never holds stale entries: its size is the number of
 * held locks, however many extends happened.
 *
 * Deadlines are mirrored in a Float64Array next to the lease references, so sifting compares
 * numbers in one contiguous array instead of dereferencing a lease per comparison (at 100,000
 * leases those would be cache misses).
 */
export interface DeadlineHeap {
  readonly size: number;
  peek(): Lease | undefined;
  push(lease: Lease): void;
  /** Restores order after `lease.deadline` changed (either way). */
  update(lease: Lease): void;
  remove(lease: Lease): void;
}

export function createDeadlineHeap(): DeadlineHeap {
  const items: Lease[] = [];
  let keys = new Float64Array(64);

  const place = (lease: Lease, key: number, index: number) => {
    items[index] = lease;
    keys[index] = key;
    lease.heapIndex = index;
  };

  const siftUp = (index: number) => {
    const lease = items[index]!;
    const key = lease.deadline;
    while (index > 0) {
      const parent = (index - 1) >> 1;
      if (keys[parent]! <= key) break;
      place(items[parent]!, keys[parent]!, index);
      index = parent;
    }
    place(lease, key, index);
  };

  const siftDown = (index: number) => {
    const lease = items[index]!;
    const key = lease.deadline;
    const length = items.length;
    for (;;) {
      const left = 2 * index + 1;
      if (left >= length) break;
      const right = left + 1;
      const child = right < length && keys[right]! < keys[left]! ? right : left;
      if (keys[child]! >= key) break;
      place(items[child]!, keys[child]!, index);
      index = child;
    }
    place(lease, key, index);
  };

  /** Moves the lease at `index` (whose deadline may have changed) to where it belongs. */
  const restore = (index: number) => {
    if (index > 0 && keys[(index - 1) >> 1]! > items[index]!.deadline) siftUp(index);
    else siftDown(index);
  };

  return {
    get size() {
      return items.length;
    },
    peek: () => items[0],
    push(lease) {
      const index = items.length;
      if (index === keys.length) {
        const grown = new Float64Array(keys.length * 2);
        grown.set(keys);
        keys = grown;
      }
      items.push(lease);
      place(lease, lease.deadline, index);
      siftUp(index);
    },
    update(lease) {
      if (lease.heapIndex >= 0) restore(lease.heapIndex);
    },
    remove(lease) {
      const index = lease.heapIndex;
      if (index < 0) return;
      lease.heapIndex = -1;
      const last = items.pop()!;
      if (last === lease) return;
      place(last, last.deadline, index);
      restore(index);
    },
  };
}
