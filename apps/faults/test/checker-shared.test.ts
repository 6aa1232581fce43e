import { describe, expect, it } from 'vitest';
import { checkHistory } from '../src/checker.js';
import { historyBuilder } from './history-builder.js';

const sem = { mode: 'shared', limit: 3 } as const;

function check(builder: ReturnType<typeof historyBuilder>) {
  return checkHistory(builder.end(10_000).sorted(), { l1BoundMs: 500, l4BoundMs: 200 });
}

/** The properties with violations, for exact assertions. */
function flagged(builder: ReturnType<typeof historyBuilder>) {
  const { counts } = check(builder);
  return Object.entries(counts)
    .filter(([, count]) => count > 0)
    .map(([property]) => property);
}

/** Holders p1…p`count` of semaphore `s` (limit 3), granted at 10, 20, …, each releasing at 500. */
function semaphoreHolders(count: number) {
  const h = historyBuilder();
  for (let i = 1; i <= count; i++) {
    h.acquire(`p${i}`, 's', i * 10 - 5, i * 10, i, sem).release(`p${i}`, 's', 500, 501, i);
  }
  return h;
}

describe('S7 on hand-made histories (shared modes)', () => {
  it('passes a semaphore at its limit, holders coming and going, with tokens increasing', () => {
    const h = semaphoreHolders(3)
      // p4 asks at 35 and is granted only after p1's release (at 500) was sent.
      .acquire('p4', 's', 35, 502, 4, sem)
      .release('p4', 's', 600, 601, 4);
    const result = check(h);
    expect(result.violations).toEqual([]);
    expect(result.stats.grants).toBe(4);
  });

  it('catches limit + 1 shared holders at once', () => {
    const result = check(semaphoreHolders(4));
    expect(result.counts.S7).toBe(1);
    expect(result.violations[0]).toMatchObject({ property: 'S7', name: 's' });
    expect(result.violations[0]!.message).toMatch(/holder 4 of limit 3/);
    // Exactly that, nothing else: shared holders outliving newer shared grants are not S4/S5/S6.
    expect(flagged(semaphoreHolders(4))).toEqual(['S7']);
  });

  it('catches an exclusive holder beside a shared one, in either order', () => {
    const writerAfterReader = historyBuilder()
      .acquire('r1', 'rw', 0, 10, 1, { mode: 'shared', limit: 10_000 })
      .acquire('w1', 'rw', 5, 20, 2)
      .release('w1', 'rw', 100, 101, 2)
      .release('r1', 'rw', 200, 201, 1);
    expect(check(writerAfterReader).counts.S7).toBe(1);
    expect(check(writerAfterReader).violations.find((v) => v.property === 'S7')?.message).toMatch(
      /exclusive holder beside another/,
    );
    const readerAfterWriter = historyBuilder()
      .acquire('w1', 'rw', 0, 10, 1)
      .acquire('r1', 'rw', 5, 20, 2, { mode: 'shared', limit: 10_000 })
      .release('r1', 'rw', 100, 101, 2)
      .release('w1', 'rw', 200, 201, 1);
    expect(check(readerAfterWriter).counts.S7).toBe(1);
  });

  it('passes readers together and a writer after them (a read-write lock)', () => {
    const read = { mode: 'shared', limit: 10_000 } as const;
    const h = historyBuilder()
      .acquire('r1', 'rw', 0, 10, 1, read)
      .acquire('r2', 'rw', 1, 11, 2, read)
      .acquire('w1', 'rw', 2, 102, 3) // waits for both readers' releases
      .release('r1', 'rw', 50, 51, 1)
      .release('r2', 'rw', 100, 101, 2)
      .acquire('r3', 'rw', 3, 202, 4, read) // queued behind the writer
      .release('w1', 'rw', 200, 201, 3)
      .release('r3', 'rw', 300, 301, 4);
    expect(check(h).violations).toEqual([]);
  });

  it('catches shared holders on two different limits', () => {
    const h = historyBuilder()
      .acquire('p1', 's', 0, 10, 1, { mode: 'shared', limit: 3 })
      .acquire('p2', 's', 0, 20, 2, { mode: 'shared', limit: 4 });
    expect(check(h).violations.find((v) => v.property === 'S7')?.message).toMatch(/limits 3, 4/);
  });

  it('a holder ends at its release request, its loss or its local deadline, not at a kill', () => {
    // p1 sent its release at 30 (answered at 45): p4's grant at 40 may come after it took effect.
    const released = historyBuilder()
      .acquire('p1', 's', 0, 1, 1, sem)
      .acquire('p2', 's', 0, 2, 2, sem)
      .acquire('p3', 's', 0, 3, 3, sem)
      .release('p1', 's', 30, 45, 1)
      .acquire('p4', 's', 5, 40, 4, sem);
    expect(check(released).counts.S7).toBe(0);
    // The same grant before p1's release was even sent: one holder too many.
    const early = historyBuilder()
      .acquire('p1', 's', 0, 1, 1, sem)
      .acquire('p2', 's', 0, 2, 2, sem)
      .acquire('p3', 's', 0, 3, 3, sem)
      .acquire('p4', 's', 5, 29, 4, sem)
      .release('p1', 's', 30, 45, 1);
    expect(check(early).counts.S7).toBe(1);
    const afterDeadline = historyBuilder()
      .acquire('p1', 's', 0, 1, 1, { ...sem, deadline: 100 })
      .acquire('p2', 's', 0, 2, 2, sem)
      .acquire('p3', 's', 0, 3, 3, sem)
      .acquire('p4', 's', 0, 150, 4, sem) // p1's lease is over by its own deadline
      .lost('p1', 's', 100, 1);
    expect(check(afterDeadline).counts.S7).toBe(0);
    // Killed at 50, p1's lease runs on at the backend until its deadline (990): p4 is one too many.
    const killed = historyBuilder()
      .acquire('p1', 's', 0, 1, 1, sem)
      .process(50, 'p1', 'kill')
      .acquire('p2', 's', 0, 2, 2, sem)
      .acquire('p3', 's', 0, 3, 3, sem)
      .acquire('p4', 's', 0, 150, 4, sem);
    expect(check(killed).counts.S7).toBe(1);
  });

  it('recovery in a history without writes (a semaphore): from each fault to the next grant', () => {
    const h = semaphoreHolders(2)
      .fault(100, 1, 'server-kill', 'start', 'server')
      .fault(200, 1, 'server-kill', 'end', 'server')
      .acquire('p3', 's', 150, 260, 3, sem)
      .release('p3', 's', 300, 301, 3);
    expect(check(h).recoveryMs).toEqual([60]);
  });

  it('exclusive-only histories stay S6 business: two exclusive holders are not S7', () => {
    const h = historyBuilder().acquire('p1', 'x', 0, 1, 1).acquire('p2', 'x', 5, 100, 2);
    expect(flagged(h)).toContain('S6');
    expect(flagged(h)).not.toContain('S7');
  });

  it("S4 still holds between modes: a reader's extend after a writer's grant", () => {
    const h = historyBuilder()
      .acquire('r1', 'rw', 0, 1, 1, { mode: 'shared', limit: 10_000, deadline: 50 })
      .lost('r1', 'rw', 50, 1)
      .acquire('w1', 'rw', 2, 100, 2)
      .extend('r1', 'rw', 150, 151, 1, 1_000)
      .release('w1', 'rw', 200, 201, 2);
    expect(flagged(h)).toContain('S4');
  });
});
