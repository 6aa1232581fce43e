import type { Lease } from './lease.js';

/**
 * A binary min-heap of leases ordered by deadline, so one timer (for the earliest deadline)
 * serves every held lock. Each lease records its own index, so an extend or a release moves or
 * removes it in O(log n) and the heap never holds stale entries: its size is the number of
 * held locks, however many extends happened.
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

  const place = (lease: Lease, index: number) => {
    items[index] = lease;
    lease.heapIndex = index;
  };

  const siftUp = (index: number) => {
    const lease = items[index]!;
    while (index > 0) {
      const parentIndex = (index - 1) >> 1;
      const parent = items[parentIndex]!;
      if (parent.deadline <= lease.deadline) break;
      place(parent, index);
      index = parentIndex;
    }
    place(lease, index);
  };

  const siftDown = (index: number) => {
    const lease = items[index]!;
    const length = items.length;
    for (;;) {
      const left = 2 * index + 1;
      if (left >= length) break;
      const right = left + 1;
      let child = left;
      if (right < length && items[right]!.deadline < items[left]!.deadline) child = right;
      if (items[child]!.deadline >= lease.deadline) break;
      place(items[child]!, index);
      index = child;
    }
    place(lease, index);
  };

  return {
    get size() {
      return items.length;
    },
    peek: () => items[0],
    push(lease) {
      items.push(lease);
      lease.heapIndex = items.length - 1;
      siftUp(lease.heapIndex);
    },
    update(lease) {
      const index = lease.heapIndex;
      if (index < 0) return;
      if (index > 0 && items[(index - 1) >> 1]!.deadline > lease.deadline) siftUp(index);
      else siftDown(index);
    },
    remove(lease) {
      const index = lease.heapIndex;
      if (index < 0) return;
      lease.heapIndex = -1;
      const last = items.pop()!;
      if (last === lease) return;
      place(last, index);
      if (index > 0 && items[(index - 1) >> 1]!.deadline > last.deadline) siftUp(index);
      else siftDown(index);
    },
  };
}
