import {
  type AcquireRequest,
  createLockService,
  type LockBackend,
  type LockMode,
  type LockService,
} from '@dlm/core';
import { describe, expect, it } from 'vitest';
import type { ConformanceContext } from '../context.js';
import { type HolderCheck, holderCheck } from '../holder-check.js';
import { servicesFor, sharedModesTest } from '../shared-support.js';
import { lockName } from '../support.js';
import { sleep } from '../wait.js';

/** The S7 run's shape: 32 contenders on one name, about 3 in 4 of them shared with limit 3. */
const CONTENDERS = 32;
const LIMIT = 3;
const SHARED_SHARE = 0.75;
const RUN_MS = 4_000;
/** The shortest hold; each hold lasts up to twice it. */
const HOLD_MS = 8;
/** Leases far longer than any hold, so that no lease runs out while its caller counts it. */
const LEASE_MS = 30_000;
/** L6: how long each reader holds its read lock. */
const READ_HOLD_MS = 150;
/** L6: how long readers keep arriving once the writer has. */
const READERS_RUN_MS = 3_000;

interface Run {
  check: HolderCheck;
  failures: string[];
}

/**
 * One contender: until `endAt`, takes the name in a random mode (waiting, first come first
 * served), holds it for a moment while counted by `check`, and releases it.
 */
async function contender(
  service: LockService,
  name: string,
  owner: string,
  endAt: number,
  sharedShare: number,
  run: Run,
): Promise<void> {
  while (Date.now() < endAt) {
    const mode: LockMode = Math.random() < sharedShare ? 'shared' : 'exclusive';
    let token: bigint;
    try {
      const lease = await service.acquire({
        name,
        owner,
        ttlMs: LEASE_MS,
        waitMs: 20_000,
        mode,
        ...(mode === 'shared' ? { limit: LIMIT } : {}),
      });
      token = lease.token;
    } catch (error) {
      run.failures.push(`${owner} (${mode}): ${(error as Error).message}`);
      continue;
    }
    run.check.enter(mode, LIMIT);
    // Held for longer than a backend round trip: shared holders granted together then hold
    // together in the callers' view too (with holds of a millisecond or two, a backend whose
    // grants take 10 ms would show one reader at a time, and prove nothing about sharing).
    await sleep(HOLD_MS + Math.floor(Math.random() * HOLD_MS));
    run.check.leave(mode);
    // A release refused (NOT_HOLDER: the backend dropped the lease) is a failure to report,
    // not a reason to stop the run before the counter has seen what the backend did.
    await service
      .release({ name, token })
      .catch((error: Error) => run.failures.push(`${owner} release: ${error.message}`));
  }
}

/** `CONTENDERS` contenders spread over `services` for `runMs`, with a look at `get` meanwhile. */
async function contend(
  services: readonly LockService[],
  name: string,
  runMs: number,
  sharedShare: number,
): Promise<Run> {
  const run: Run = { check: holderCheck(LIMIT), failures: [] };
  const endAt = Date.now() + runMs;
  const observer = (async () => {
    // The backend's own view, as a second witness; at a pace that leaves the run its backend.
    while (Date.now() < endAt) {
      run.check.observe(await services[0]!.get(name));
      await sleep(100);
    }
  })();
  await Promise.all(
    Array.from({ length: CONTENDERS }, (_, i) =>
      contender(services[i % services.length]!, name, `c${i}`, endAt, sharedShare, run),
    ),
  );
  await observer;
  return run;
}

/**
 * A planted S7 violation: a backend that grants shared requests up to twice the limit they
 * asked for (an adapter that loses the limit). Its close leaves the real backend open: the
 * test's context closes that one.
 */
function overGranting(backend: LockBackend): LockBackend {
  const doubled = <T extends AcquireRequest>(request: T): T =>
    request.mode === 'shared' ? { ...request, limit: (request.limit ?? 1) * 2 } : request;
  const { queue } = backend;
  return {
    kind: backend.kind,
    capabilities: backend.capabilities,
    tryAcquire: (request) => backend.tryAcquire(doubled(request)),
    release: (request) => backend.release(request),
    extend: (request) => backend.extend(request),
    inspect: (name) => backend.inspect(name),
    watch: (name, listener) => backend.watch(name, listener),
    ...(backend.followChanges
      ? { followChanges: (name: string) => backend.followChanges!(name) }
      : {}),
    // The queue's driver gets the doubled request too (the queue object is a plain one).
    ...(queue
      ? { queue: { ...queue, driver: (request, waiter) => queue.driver(doubled(request), waiter) } }
      : {}),
    ...(backend.revoke ? { revoke: (name: string) => backend.revoke!(name) } : {}),
    close: async () => {},
  };
}

/**
 * Shared modes under load (S7) and the waiting writer (L6), for backends with
 * `capabilities.sharedModes`; over several servers where the backend orders waiters itself.
 */
export function sharedLoadGroup(ctx: ConformanceContext): void {
  describe('shared modes under load', () => {
    it(
      `S7: ${CONTENDERS} contenders, shared (limit ${LIMIT}) and exclusive on one name: never more than ${LIMIT} shared holders, never an exclusive one beside another (over 4 servers with a fair queue)`,
      sharedModesTest(ctx, s7UnderLoad),
      RUN_MS + 40_000,
    );
    it(
      'the S7 check catches a backend that grants shared holders past the limit (negative control)',
      sharedModesTest(ctx, s7CatchesOverGranting),
      40_000,
    );
    it(
      'L6: a waiting writer is granted within a bound while readers keep arriving (over 3 servers with a fair queue)',
      sharedModesTest(ctx, writerAmongReaders),
      40_000,
    );
  });
}

async function s7UnderLoad(ctx: ConformanceContext): Promise<void> {
  const name = lockName('s7-load');
  const services = await servicesFor(ctx, 4);
  const { check, failures } = await contend(services, name, RUN_MS, SHARED_SHARE);
  expect(check.violations).toEqual([]);
  // Every wait is far shorter than its 20 s bound: none may have failed.
  expect(failures).toEqual([]);
  // The run did exercise both modes, and shared holders did hold together.
  expect(check.grants.shared).toBeGreaterThan(CONTENDERS);
  expect(check.grants.exclusive).toBeGreaterThan(CONTENDERS / 8);
  expect(check.maxShared).toBeGreaterThan(1);
  expect(await ctx.service.get(name)).toBeNull();
}

async function s7CatchesOverGranting(ctx: ConformanceContext): Promise<void> {
  const name = lockName('s7-planted');
  const broken = createLockService({ backend: overGranting(ctx.backend) });
  try {
    const { check } = await contend([broken], name, 2_000, 0.9);
    expect(check.violations.length).toBeGreaterThan(0);
    expect(check.violations.join('\n')).toMatch(/shared holders/);
  } finally {
    await broken.close();
  }
}

/** What the L6 readers share: the counter, what failed, and whether the writer is done. */
interface ReadersRun {
  readonly check: HolderCheck;
  readonly readLimit: number;
  readonly failures: string[];
  /** When the readers stop coming back (none until the writer has arrived). */
  stopAt: number;
  writerDone: boolean;
  readsAfterWriter: number;
}

/**
 * L6 reader `i`: after a stagger of `i * 30` ms, until `run.stopAt`, takes a read lock (shared,
 * the default limit), holds it, releases it and comes straight back.
 */
async function reader(
  service: LockService,
  name: string,
  i: number,
  run: ReadersRun,
): Promise<void> {
  await sleep(i * 30);
  while (Date.now() < run.stopAt) {
    try {
      const lease = await service.acquire({
        name,
        owner: `reader-${i}`,
        ttlMs: LEASE_MS,
        waitMs: 20_000,
        mode: 'shared',
      });
      run.check.enter('shared', run.readLimit);
      if (run.writerDone) run.readsAfterWriter += 1;
      await sleep(READ_HOLD_MS);
      run.check.leave('shared');
      await service.release({ name, token: lease.token });
    } catch (error) {
      run.failures.push(`reader-${i}: ${(error as Error).message}`);
      // Not in a tight loop: an acquire that fails at once (a closed service) would spin.
      await sleep(READ_HOLD_MS);
    }
  }
}

/** The L6 writer: takes `name`, holds it for a moment while counted, releases it; how long it waited. */
async function writeOnce(service: LockService, name: string, check: HolderCheck): Promise<number> {
  const arrived = performance.now();
  const writer = await service.acquire({ name, owner: 'writer', ttlMs: LEASE_MS, waitMs: 15_000 });
  const waitedMs = performance.now() - arrived;
  check.enter('exclusive');
  await sleep(100);
  check.leave('exclusive');
  await service.release({ name, token: writer.token });
  return waitedMs;
}

async function writerAmongReaders(ctx: ConformanceContext): Promise<void> {
  const name = lockName('l6-writer');
  const services = await servicesFor(ctx, 3);
  const readLimit = ctx.service.limits.maxHolders;
  const run: ReadersRun = {
    check: holderCheck(readLimit),
    readLimit,
    failures: [],
    stopAt: Number.POSITIVE_INFINITY,
    writerDone: false,
    readsAfterWriter: 0,
  };
  // Six readers, staggered so that the name is never free of readers.
  const readers = Array.from({ length: 6 }, (_, i) =>
    reader(services[(i + 1) % services.length]!, name, i, run),
  );
  let waitedMs: number;
  try {
    await sleep(600);
    // Readers hold the name when the writer arrives, and more keep arriving behind it.
    expect(run.check.holding.shared).toBeGreaterThan(0);
    run.stopAt = Date.now() + READERS_RUN_MS;
    waitedMs = await writeOnce(services[0]!, name, run.check);
    run.writerDone = true;
  } finally {
    // On every path the readers stop: a failure before the writer's turn would otherwise leave
    // them looping past the test's end, on services closed under them (a worker spun for 15
    // minutes at 2.8 GB that way once, and the file never finished).
    if (!Number.isFinite(run.stopAt)) run.stopAt = Date.now();
    await Promise.all(readers);
  }
  // The writer waits only for the readers that held the name when it arrived (one hold,
  // plus the hand-over); readers arriving after it wait behind it. A backend that let
  // them in would keep the writer out until the readers stop, `READERS_RUN_MS` later.
  expect(waitedMs).toBeLessThan(READ_HOLD_MS + 1_500);
  expect(run.check.violations).toEqual([]);
  expect(run.failures).toEqual([]);
  // And the readers went on once the writer was done.
  expect(run.readsAfterWriter).toBeGreaterThan(0);
}
