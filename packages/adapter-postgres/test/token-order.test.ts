import { lockName, until } from '@dlm/conformance';
import { createLockService, type Lease, type LockService } from '@dlm/core';
import { postgresAvailable } from '@dlm/test-services';
import { beforeAll, describe, expect, it } from 'vitest';
import type { PostgresBackend } from '../src/index.js';
import { lateBarrier, usePostgres } from './support.js';

/**
 * SPEC.md: "for one lock name, every grant's token is greater than every earlier grant's". A
 * grant whose statement took its token and was then held up before it wrote (waiting for the
 * name's row, or just descheduled) must not land after a newer grant of the name with its older
 * token. These tests hold such a statement at exactly that point, deterministically: a trigger
 * of the test's own on the lease and holder tables takes an advisory lock that the test holds
 * whenever a row is written for an owner named `late…`, so the late caller's statement stops
 * after everything it computed before its write. Meanwhile another caller takes the name and
 * gives it back. The late grant, if it lands, must carry a token above that one.
 */

const BARRIER = 4242;
const PREFIX = 'tok_';

const run = postgresAvailable();

/** How the late caller asks, through core's service: every path that writes a grant. */
interface LateCase {
  what: string;
  take(service: LockService, names: [string, string]): Promise<Lease[]>;
}

const late = { owner: 'late-1', ttlMs: 60_000 } as const;

const CASES: LateCase[] = [
  {
    what: 'an exclusive try-lock',
    take: async (service, [name]) => [await service.acquire({ ...late, name })],
  },
  {
    what: 'an exclusive acquire that may wait (the queue join grants a free name)',
    take: async (service, [name]) => [await service.acquire({ ...late, name, waitMs: 5_000 })],
  },
  {
    what: 'a shared try-lock',
    take: async (service, [name]) => [
      await service.acquire({ ...late, name, mode: 'shared', limit: 2 }),
    ],
  },
  {
    what: 'a shared acquire that may wait',
    take: async (service, [name]) => [
      await service.acquire({ ...late, name, mode: 'shared', limit: 2, waitMs: 5_000 }),
    ],
  },
  {
    what: 'an all-or-nothing multi-lock',
    take: (service, names) =>
      service.acquireAll({ ...late, locks: names.map((name) => ({ name })) }),
  },
];

describe.skipIf(!run)('postgres: a grant delayed between its token and its write', () => {
  const scope = usePostgres(PREFIX);
  const { admin, open } = scope;
  const barrier = lateBarrier(scope, PREFIX, BARRIER);
  // Two dlm servers on one database: the late caller on the first, the other on the second.
  let backends: [PostgresBackend, PostgresBackend];

  beforeAll(async () => {
    backends = [await open(), await open()];
    await barrier.install(['leases', 'holders']);
  });

  for (const { what, take } of CASES) {
    it(`${what}: a grant that lands after another's carries the higher token`, async () => {
      const [service, other] = backends.map((backend) => createLockService({ backend })) as [
        LockService,
        LockService,
      ];
      const names = [lockName('late-a'), lockName('late-b')].sort() as [string, string];
      const [first] = names;
      await admin().query('SELECT pg_advisory_lock($1)', [BARRIER]);
      let lateLeases: Lease[] | undefined;
      try {
        const lateTake = take(service, names);
        await until(async () => (await barrier.waiting()) >= 1);
        // A caller on the other server takes the name and gives it back while the late
        // statement is held.
        let settled = false;
        const quick = other
          .acquire({ name: first, owner: 'quick', ttlMs: 60_000 })
          .then(
            (lease) => lease,
            () => null,
          )
          .finally(() => {
            settled = true;
          });
        // Either it is granted at once, or it waits for the late caller's row (it then must
        // not be granted: the late grant lands first, and holds the name).
        await until(async () => settled || (await barrier.waiting()) >= 2);
        const quickLease = settled ? await quick : null;
        if (quickLease) await other.release({ name: first, token: quickLease.token });
        await admin().query('SELECT pg_advisory_unlock($1)', [BARRIER]);
        lateLeases = await lateTake;
        const lateToken = lateLeases[0]!.token;
        if (quickLease) expect(lateToken).toBeGreaterThan(quickLease.token);
        else expect(await quick).toBeNull();
        expect((await service.get(first))?.token).toBe(lateToken);
      } finally {
        await admin().query('SELECT pg_advisory_unlock_all()');
        for (const lease of lateLeases ?? []) {
          await service.release({ name: lease.name, token: lease.token }).catch(() => {});
        }
        await Promise.all([service.close(), other.close()]);
      }
    });
  }
});
