import type {
  FaultEvent,
  HistoryEvent,
  LostEvent,
  OpEvent,
  ProcessEvent,
  ResourceEvent,
} from './history.js';

/**
 * The properties of the architecture (docs/architecture.md, "Properties the tests hold the system
 * to") as checked from a history:
 *
 * - S1: the fenced resource never accepts a token lower than one it already accepted.
 * - S2: per name, grants' tokens are unique and increase in real-time order.
 * - S3: no lost update on the fenced counter.
 * - S4: a stale holder's release or extend never succeeds once a newer holder was granted, and
 *   a release or extend by a process never granted that token (a meddler) never succeeds.
 * - S5: no grant is reported already over.
 * - S6: no client believes it holds an exclusive lease while a newer exclusive holder has been
 *   granted the lock (the client's local deadline ends before the backend's expiry).
 * - S7: never more than `limit` shared holders of a name at once, never an exclusive holder
 *   beside a shared one, and shared holders agree on `limit` (exclusive beside exclusive is S6).
 *   A holder holds from its grant's reply to its release's request, its reported loss or its
 *   local deadline, whichever comes first: the part of the lease it certainly held, so that a
 *   violation is never one of timing.
 * - S9 (lock-delay): a lease asked with `lockDelayMs` that ended other than by a release (it
 *   expired: its holder was paused, cut off or killed) keeps its name from everyone until
 *   `lockDelayMs` after its end: the next grant of the name is not reported before the earliest
 *   that end can be (the acquire's send plus its TTL) plus the delay, unless a release of the
 *   lease was sent before it.
 * - S10 (hold cap): a lease asked with `maxHoldMs` is never held past its grant plus the cap:
 *   no renewal leaves its holder a deadline later than the grant's reply (the latest the grant
 *   can have been) plus `maxHoldMs` (the holder's deadline comes before the server's end, so a
 *   later one means the server's lease ran past the cap).
 * - L1: after a holder dies (killed or paused), the lock is free again within its lease
 *   (and its lock-delay) plus `l1BoundMs`.
 * - L4: a client reports a lease lost within its local deadline (or, if it was paused then,
 *   its resumption) plus `l4BoundMs`.
 */
export const PROPERTIES = [
  'S1',
  'S2',
  'S3',
  'S4',
  'S5',
  'S6',
  'S7',
  'S9',
  'S10',
  'L1',
  'L4',
] as const;
export type Property = (typeof PROPERTIES)[number];

export interface Violation {
  property: Property;
  name: string;
  /** When it showed (the history's time line). */
  t: number;
  message: string;
  /** How many violations this entry stands for (lost updates on one key), default 1. */
  count?: number;
}

export interface CheckOptions {
  /** L1: how long past the lease's end the next holder may take to get the lock. */
  l1BoundMs: number;
  /** L4: how long past the local deadline (or the resumption) the client may take to say so. */
  l4BoundMs: number;
  /** The resource's counters at the end, per key (name). */
  finalValues?: Record<string, number>;
}

export interface CheckStats {
  /** Operations invoked. */
  ops: number;
  okOps: number;
  /** Acquires that returned a lease. */
  grants: number;
  /** Writes acknowledged by the resource. */
  writes: number;
  /** Reads and writes the resource refused as stale. */
  staleRefused: number;
  /** Operations whose outcome is unknown (info, or never completed). */
  unknown: number;
  /** Leases the clients reported lost. */
  lost: number;
  /** Faults injected. */
  faults: number;
  /**
   * Releases and extends by processes never granted the token they presented (meddlers):
   * answered at all, and of those, refused (NOT_HOLDER). Every other answer is an S4 violation.
   */
  meddling: { answered: number; refused: number };
}

export interface CheckResult {
  violations: Violation[];
  counts: Record<Property, number>;
  stats: CheckStats;
  /** Per fault, ms from its end to the next acknowledged write (null: none before the end). */
  recoveryMs: (number | null)[];
  /** Per dead or paused holder (L1), ms from its lease's end to the next grant of the lock. */
  takeoverMs: number[];
  /**
   * Per fault, ms from its start to the first grant of an acquire sent after it (null: none);
   * after a master's kill -9, the time the deployment took to grant again.
   */
  firstGrantMs?: (number | null)[];
  /**
   * Grants of a lock the backend still held for an earlier grant: completed before that
   * grant's acquire was sent plus its TTL (the earliest its lease can end), with no release of
   * it that ran or may have run (ok or unknown) sent before. A backend that lost a grant (a
   * failover to a replica that never had it) shows here even when its holder, having given up,
   * never acted on it: S6 counts only holders that had not tried to release.
   */
  doubleGrants?: number;
}

interface Op {
  proc: string;
  f: OpEvent['f'];
  name: string;
  token: bigint | undefined;
  invoke: OpEvent;
  done: OpEvent | undefined;
}

interface Grant {
  op: Op;
  proc: string;
  name: string;
  token: bigint;
  /** The mode granted, and the holders' limit for `shared`. */
  mode: 'exclusive' | 'shared';
  limit: number | undefined;
  invokeT: number;
  okT: number;
  ttlMs: number;
  /** Successful renewals (the acquire's own ok first), ordered by time. */
  renewals: { okT: number; deadline: number }[];
  releaseInvokeT: number | undefined;
  lostT: number | undefined;
  /** The lock-delay the acquire asked for (0: none). */
  lockDelayMs: number;
  /** The cap on holding the acquire asked for (undefined: none). */
  maxHoldMs: number | undefined;
}

const INF = Number.POSITIVE_INFINITY;

/** Two leases that cannot both hold a name at once: either is exclusive. */
const conflicting = (a: Grant, b: Grant) => a.mode === 'exclusive' || b.mode === 'exclusive';
const token = (text: string | undefined) => (text === undefined ? undefined : BigInt(text));

/** Pairs each invoke with its completion. */
function collectOps(events: HistoryEvent[]): Op[] {
  const open = new Map<string, Op>();
  const ops: Op[] = [];
  for (const event of events) {
    if (event.kind !== 'op') continue;
    const key = `${event.proc}#${event.op}`;
    if (event.type === 'invoke') {
      const op: Op = {
        proc: event.proc,
        f: event.f,
        name: event.name,
        token: token(event.token),
        invoke: event,
        done: undefined,
      };
      open.set(key, op);
      ops.push(op);
    } else {
      const op = open.get(key);
      if (!op) continue;
      open.delete(key);
      op.done = event;
      if (op.token === undefined && event.token !== undefined) op.token = token(event.token);
    }
  }
  return ops;
}

function intervalsOf(events: HistoryEvent[]) {
  const pauses = new Map<string, [number, number][]>();
  const killed = new Map<string, number>();
  const stopped = new Map<string, number>();
  const pausedSince = new Map<string, number>();
  const linkFaults = new Map<string, [number, number][]>();
  const faultStarts = new Map<number, FaultEvent>();
  for (const event of events) {
    if (event.kind === 'process') {
      const p = event as ProcessEvent;
      if (p.what === 'pause') pausedSince.set(p.target, p.t);
      else if (p.what === 'resume') {
        const since = pausedSince.get(p.target);
        if (since !== undefined) {
          pausedSince.delete(p.target);
          pauses.set(p.target, [...(pauses.get(p.target) ?? []), [since, p.t]]);
        }
      } else if (p.what === 'kill') {
        if (!killed.has(p.target)) killed.set(p.target, p.t);
      } else if (p.what === 'stop') {
        if (!stopped.has(p.target)) stopped.set(p.target, p.t);
      }
    } else if (event.kind === 'fault' && event.nemesis.startsWith('client-net') && event.target) {
      if (event.phase === 'start') faultStarts.set(event.id, event);
      else {
        const start = faultStarts.get(event.id);
        if (start) {
          linkFaults.set(event.target, [
            ...(linkFaults.get(event.target) ?? []),
            [start.t, event.t],
          ]);
        }
      }
    }
  }
  // A pause without a resume lasts to the end of the history.
  for (const [target, since] of pausedSince) {
    pauses.set(target, [...(pauses.get(target) ?? []), [since, INF]]);
  }
  return { pauses, killed, stopped, linkFaults };
}

const overlaps = (list: [number, number][] | undefined, from: number, to: number) =>
  (list ?? []).some(([start, end]) => start <= to && end >= from);

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    let group = groups.get(k);
    if (!group) {
      group = [];
      groups.set(k, group);
    }
    group.push(item);
  }
  return groups;
}

/**
 * For each item ordered by `start`, the highest `value` among the items that completed
 * (`end`) strictly before it started: the real-time order check of S1 and S2.
 */
function highestCompletedBefore<T>(
  items: T[],
  start: (item: T) => number,
  end: (item: T) => number,
  value: (item: T) => bigint,
  visit: (item: T, highest: bigint | undefined, by: T | undefined) => void,
): void {
  const byEnd = [...items].sort((a, b) => end(a) - end(b));
  const byStart = [...items].sort((a, b) => start(a) - start(b));
  let index = 0;
  let highest: bigint | undefined;
  let by: T | undefined;
  for (const item of byStart) {
    while (index < byEnd.length && end(byEnd[index]!) < start(item)) {
      const candidate = byEnd[index]!;
      if (highest === undefined || value(candidate) > highest) {
        highest = value(candidate);
        by = candidate;
      }
      index++;
    }
    visit(item, highest, by);
  }
}

/** Where a check reports what it found. */
type Flag = (violation: Violation) => void;

/**
 * A history read once for every check: operations paired, fault intervals per process, and
 * the grants with what became of them (renewals, release, loss).
 */
interface Checked {
  ops: Op[];
  pauses: Map<string, [number, number][]>;
  killed: Map<string, number>;
  stopped: Map<string, number>;
  linkFaults: Map<string, [number, number][]>;
  resourceEvents: ResourceEvent[];
  lostEvents: LostEvent[];
  faults: FaultEvent[];
  endOfHistory: number;
  grants: Grant[];
  grantsByName: Map<string, Grant[]>;
  /** The grant of `t` to `proc` on `name` that an operation invoked at `at` refers to. */
  grantAt(proc: string, name: string, t: bigint, at: number): Grant | undefined;
  ackedWrites: Op[];
}

function readHistory(events: HistoryEvent[]): Checked {
  const ops = collectOps(events);
  const lostEvents = events.filter((e): e is LostEvent => e.kind === 'lost');
  const { grants, grantAt } = collectGrants(ops, lostEvents);
  return {
    ops,
    ...intervalsOf(events),
    resourceEvents: events.filter((e): e is ResourceEvent => e.kind === 'resource'),
    lostEvents,
    faults: events.filter((e): e is FaultEvent => e.kind === 'fault'),
    endOfHistory: events.length ? events[events.length - 1]!.t : 0,
    grants,
    grantsByName: groupBy(grants, (g) => g.name),
    grantAt,
    ackedWrites: ops.filter((op) => op.f === 'write' && op.done?.type === 'ok'),
  };
}

/** Every acquire that returned a lease, with its extends, release and reported loss. */
function collectGrants(ops: Op[], lostEvents: LostEvent[]) {
  const grants: Grant[] = [];
  // A backend that forgets its counters (Redis without AOF) can grant one process the same
  // token twice: an extend, release or loss belongs to that process's latest such grant.
  const grantIndex = new Map<string, Grant[]>();
  const grantKey = (proc: string, name: string, t: bigint) => `${proc}\u0000${name}\u0000${t}`;
  const grantAt = (proc: string, name: string, t: bigint, at: number) =>
    grantIndex
      .get(grantKey(proc, name, t))
      ?.filter((grant) => grant.okT <= at)
      .at(-1);
  for (const op of ops) {
    if (op.f !== 'acquire' || op.done?.type !== 'ok' || op.token === undefined) continue;
    const grant: Grant = {
      op,
      proc: op.proc,
      name: op.name,
      token: op.token,
      mode: op.done.mode ?? op.invoke.mode ?? 'exclusive',
      limit: op.done.limit ?? op.invoke.limit,
      invokeT: op.invoke.t,
      okT: op.done.t,
      ttlMs: op.done.ttlMs ?? 0,
      renewals: [
        { okT: op.done.t, deadline: op.done.deadline ?? op.done.t + (op.done.ttlMs ?? 0) },
      ],
      releaseInvokeT: undefined,
      lostT: undefined,
      lockDelayMs: op.invoke.lockDelayMs ?? 0,
      maxHoldMs: op.invoke.maxHoldMs,
    };
    grants.push(grant);
    const key = grantKey(op.proc, op.name, op.token);
    grantIndex.set(key, [...(grantIndex.get(key) ?? []), grant]);
  }
  for (const list of grantIndex.values()) list.sort((a, b) => a.okT - b.okT);
  for (const op of ops) {
    if (op.token === undefined || op.f === 'acquire') continue;
    const grant = grantAt(op.proc, op.name, op.token, op.invoke.t);
    if (!grant) continue;
    if (op.f === 'extend' && op.done?.type === 'ok') {
      grant.renewals.push({
        okT: op.done.t,
        deadline: op.done.deadline ?? op.done.t + (op.done.ttlMs ?? grant.ttlMs),
      });
    } else if (op.f === 'release') {
      grant.releaseInvokeT = Math.min(grant.releaseInvokeT ?? INF, op.invoke.t);
    }
  }
  for (const lost of lostEvents) {
    const grant = grantAt(lost.proc, lost.name, BigInt(lost.token), lost.t);
    if (grant) grant.lostT = Math.min(grant.lostT ?? INF, lost.t);
  }
  return { grants, grantAt };
}

/** S1: no stale token accepted. */
function checkS1({ resourceEvents, ops }: Checked, flag: Flag): void {
  if (resourceEvents.length) {
    // The resource's own log is complete and in its order of handling.
    for (const [name, list] of groupBy(resourceEvents, (e) => e.name)) {
      let highest: bigint | undefined;
      for (const event of list) {
        if (!event.accepted) continue;
        const t = BigInt(event.token);
        if (highest !== undefined && t < highest) {
          flag({
            property: 'S1',
            name,
            t: event.t,
            message: `resource accepted a ${event.f} with token ${t} after token ${highest}`,
          });
        } else highest = t;
      }
    }
    return;
  }
  // From the clients' side: an access acknowledged with token t although an access with a
  // higher token had been acknowledged before it was even sent.
  const accesses = ops.filter(
    (op) => (op.f === 'read' || op.f === 'write') && op.done?.type === 'ok' && op.token,
  );
  for (const [name, list] of groupBy(accesses, (op) => op.name)) {
    highestCompletedBefore(
      list,
      (op) => op.invoke.t,
      (op) => op.done!.t,
      (op) => op.token!,
      (op, highest, by) => {
        if (highest !== undefined && highest > op.token!) {
          flag({
            property: 'S1',
            name,
            t: op.done!.t,
            message: `${op.proc}'s ${op.f} with token ${op.token} was accepted after ${by!.proc}'s ${by!.f} with token ${highest} had been`,
          });
        }
      },
    );
  }
}

/** S2: tokens unique and increasing. */
function checkS2({ grantsByName }: Checked, flag: Flag): void {
  for (const [name, list] of grantsByName) {
    const seen = new Map<bigint, Grant>();
    for (const grant of list) {
      const earlier = seen.get(grant.token);
      if (earlier) {
        flag({
          property: 'S2',
          name,
          t: grant.okT,
          message: `token ${grant.token} granted twice (${earlier.proc} and ${grant.proc})`,
        });
      } else seen.set(grant.token, grant);
    }
    highestCompletedBefore(
      list,
      (g) => g.invokeT,
      (g) => g.okT,
      (g) => g.token,
      (grant, highest, by) => {
        if (highest !== undefined && highest > grant.token) {
          flag({
            property: 'S2',
            name,
            t: grant.okT,
            message: `${grant.proc} was granted token ${grant.token} after ${by!.proc} had been granted ${highest}`,
          });
        }
      },
    );
  }
}

/**
 * S9: after a lease with a lock-delay ended uncleanly, the name's next grant (by token) comes no
 * sooner than the delay after that end. The end is taken at its earliest (the acquire's send
 * plus its TTL: the server granted it after the send, and extends only move it later), and the
 * next grant at its latest (its reply), so a flag is a certain violation, not one of timing.
 */
function checkS9({ grantsByName }: Checked, flag: Flag): void {
  for (const [name, list] of grantsByName) {
    const byToken = [...list].sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
    byToken.forEach((grant, index) => {
      const next = byToken[index + 1];
      if (grant.lockDelayMs <= 0 || next === undefined) return;
      // A release sent before the next grant was reported may have ended it cleanly.
      if (grant.releaseInvokeT !== undefined && grant.releaseInvokeT < next.okT) return;
      const delayEnds = grant.invokeT + grant.ttlMs + grant.lockDelayMs;
      if (next.okT >= delayEnds) return;
      flag({
        property: 'S9',
        name,
        t: next.okT,
        message: `${next.proc} was granted token ${next.token} ${Math.round(delayEnds - next.okT)} ms before the lock-delay (${grant.lockDelayMs} ms) of ${grant.proc}'s unreleased token ${grant.token} had passed`,
      });
    });
  }
}

/**
 * S10: no lease asked with a cap on holding is renewed past it. A renewal's deadline is its
 * holder's (it ends before the server's), and the cap at its latest is the grant's reply plus
 * `maxHoldMs`, so a deadline past that is a certain violation.
 */
function checkS10({ grants }: Checked, flag: Flag): void {
  for (const grant of grants) {
    if (grant.maxHoldMs === undefined) continue;
    const capAt = grant.okT + grant.maxHoldMs;
    const over = grant.renewals.find((renewal) => renewal.deadline > capAt);
    if (!over) continue;
    flag({
      property: 'S10',
      name: grant.name,
      t: over.okT,
      message: `${grant.proc}'s token ${grant.token} was renewed until ${Math.round(over.deadline - capAt)} ms past its cap on holding (${grant.maxHoldMs} ms after its grant)`,
    });
  }
}

/** S3: no lost update, judged three ways; the largest count is the key's lost updates. */
function checkS3(history: Checked, options: CheckOptions, flag: Flag): void {
  const ackedByName = groupBy(history.ackedWrites, (op) => op.name);
  const resourceWritesByName = groupBy(
    history.resourceEvents.filter((e) => e.f === 'write' && e.accepted),
    (e) => e.name,
  );
  const names = new Set([
    ...ackedByName.keys(),
    ...resourceWritesByName.keys(),
    ...Object.keys(options.finalValues ?? {}),
  ]);
  for (const name of names) {
    const acked = ackedByName.get(name) ?? [];
    const details: string[] = [];
    // Two acknowledged writes of the same value read the same value: one overwrote the other.
    let duplicates = 0;
    for (const [value, list] of groupBy(acked, (op) => String(op.invoke.value))) {
      if (list.length > 1) {
        duplicates += list.length - 1;
        details.push(`${list.length} acknowledged writes of ${value}`);
      }
    }
    // In the resource's order, every accepted write must add one to what was there.
    let overwrites = 0;
    for (const write of resourceWritesByName.get(name) ?? []) {
      if (write.previous !== undefined && write.value !== write.previous + 1) overwrites++;
    }
    if (overwrites) details.push(`${overwrites} accepted writes did not add one to the counter`);
    const final = options.finalValues?.[name];
    let missing = 0;
    if (final !== undefined) {
      missing = Math.max(0, acked.length - final);
      const accepted = resourceWritesByName.get(name)?.length;
      if (accepted !== undefined) missing = Math.max(missing, accepted - final);
      if (missing) {
        details.push(
          `final counter ${final} < ${accepted ?? acked.length} ${accepted === undefined ? 'acknowledged' : 'accepted'} writes`,
        );
      }
    }
    const lost = Math.max(duplicates, overwrites, missing);
    if (lost) {
      flag({
        property: 'S3',
        name,
        t: acked.at(-1)?.done?.t ?? history.endOfHistory,
        message: `${lost} lost update(s): ${details.join('; ')}`,
        count: lost,
      });
    }
  }
}

/**
 * S4: no stale release or extend. "Newer" is by time, not by token: a backend that forgot its
 * counters hands out low tokens again, and a release that frees such a newer holder's lock is
 * exactly the hazard.
 */
function checkS4({ ops, grantAt, grantsByName }: Checked, flag: Flag): void {
  for (const op of ops) {
    if ((op.f !== 'release' && op.f !== 'extend') || op.done?.type !== 'ok') continue;
    if (op.f === 'release' && op.done.released !== true) continue;
    if (op.token === undefined) continue;
    const own = grantAt(op.proc, op.name, op.token, op.invoke.t);
    if (!own) {
      // A process that was never granted this token (a meddler that read it from lock.get):
      // knowing a token must not be enough to release or extend the lease (issue 22).
      flag({
        property: 'S4',
        name: op.name,
        t: op.done.t,
        message: `${op.proc}'s ${op.f} with token ${op.token}, which it was never granted, succeeded`,
      });
      continue;
    }
    // A newer shared grant does not end a shared lease: only a conflicting one does.
    const newer = (grantsByName.get(op.name) ?? []).find(
      (g) => g !== own && conflicting(g, own) && g.okT > own.okT && g.okT < op.invoke.t,
    );
    if (newer) {
      flag({
        property: 'S4',
        name: op.name,
        t: op.done.t,
        message: `${op.proc}'s ${op.f} with token ${op.token} succeeded after ${newer.proc} was granted ${newer.token}`,
      });
    }
  }
}

/** S5: no grant reported already over (or after a newer grant completed). */
function checkS5({ pauses, linkFaults }: Checked, grant: Grant, list: Grant[], flag: Flag): void {
  // A client that was paused, or whose link was faulty, while the reply was on its way
  // cannot tell when the server sent it: S5 is judged only where the reply came straight.
  const clean =
    !overlaps(pauses.get(grant.proc), grant.invokeT, grant.okT) &&
    !overlaps(linkFaults.get(grant.proc), grant.invokeT, grant.okT);
  if (!clean) return;
  const over = grant.renewals[0]!.deadline <= grant.okT;
  // A newer grant that completed while this one was on its way (one that completed
  // before this one was even asked for is S2's business).
  const newer = list.find(
    (g) =>
      g.token > grant.token && conflicting(g, grant) && g.okT > grant.invokeT && g.okT < grant.okT,
  );
  if (over || newer) {
    flag({
      property: 'S5',
      name: grant.name,
      t: grant.okT,
      message: over
        ? `${grant.proc}'s grant of token ${grant.token} arrived with no time left`
        : `${grant.proc}'s grant of token ${grant.token} arrived after ${newer!.proc} had been granted ${newer!.token}`,
    });
  }
}

/**
 * S6: no overlap as the clients see it (a newer grant before this holder's own deadline), among
 * exclusive leases; overlaps with a shared lease are S7's.
 */
function checkS6({ killed }: Checked, grant: Grant, list: Grant[], flag: Flag): void {
  if (grant.mode !== 'exclusive') return;
  const believedUntil = Math.min(
    Math.max(...grant.renewals.map((r) => r.deadline)),
    grant.releaseInvokeT ?? INF,
    grant.lostT ?? INF,
    killed.get(grant.proc) ?? INF,
  );
  const overlapping = list.find(
    (g) =>
      g.mode === 'exclusive' &&
      g.token > grant.token &&
      g.okT >= grant.okT &&
      g.okT < believedUntil,
  );
  if (overlapping) {
    flag({
      property: 'S6',
      name: grant.name,
      t: overlapping.okT,
      message: `${overlapping.proc} was granted token ${overlapping.token} while ${grant.proc} still held ${grant.token} by its own deadline (${Math.round(believedUntil - overlapping.okT)} ms left)`,
    });
  }
}

/** S5 and S6 grant by grant, so that their violations come in the history's order. */
function checkS5S6(history: Checked, flag: Flag): void {
  for (const list of history.grantsByName.values()) {
    for (const grant of list) {
      checkS5(history, grant, list, flag);
      checkS6(history, grant, list, flag);
    }
  }
}

/**
 * Until when a holder certainly held its lease: its release's request, its reported loss or its
 * local deadline (which ends before the backend's expiry), whichever is first. A killed holder's
 * lease runs on at the backend, so a kill does not end it.
 */
const heldUntil = (grant: Grant) =>
  Math.min(
    Math.max(...grant.renewals.map((r) => r.deadline)),
    grant.releaseInvokeT ?? INF,
    grant.lostT ?? INF,
  );

/**
 * S7: the holders of a name at once, checked as each grant's reply arrives (the number of
 * holders only grows then): at most the limit of shared ones, all on one limit, and an
 * exclusive one never beside a shared one. A name that only ever had exclusive grants is S6's.
 */
function checkS7({ grantsByName }: Checked, flag: Flag): void {
  for (const [name, list] of grantsByName) {
    if (!list.some((g) => g.mode === 'shared')) continue;
    const sorted = [...list].sort((a, b) => a.okT - b.okT);
    for (const [i, grant] of sorted.entries()) {
      const holders = sorted.slice(0, i + 1).filter((g) => g === grant || heldUntil(g) > grant.okT);
      if (heldUntil(grant) <= grant.okT || holders.length < 2) continue;
      const shared = holders.filter((g) => g.mode === 'shared');
      if (!shared.length) continue;
      const others = holders.filter((g) => g !== grant);
      const named = (gs: Grant[]) => gs.map((g) => `${g.proc} ${g.mode} ${g.token}`).join(', ');
      if (shared.length < holders.length) {
        flag({
          property: 'S7',
          name,
          t: grant.okT,
          message: `${grant.proc} was granted ${grant.mode} token ${grant.token} while ${named(others)} still held it: an exclusive holder beside another`,
        });
        continue;
      }
      const limits = [...new Set(shared.map((g) => g.limit ?? INF))];
      const limit = Math.min(...limits);
      if (limits.length > 1) {
        flag({
          property: 'S7',
          name,
          t: grant.okT,
          message: `${grant.proc} was granted shared token ${grant.token} with limit ${grant.limit} while ${named(others)} held it with limits ${limits.join(', ')}`,
        });
      } else if (shared.length > limit) {
        flag({
          property: 'S7',
          name,
          t: grant.okT,
          message: `${grant.proc} was granted shared token ${grant.token} as holder ${shared.length} of limit ${limit} (with ${named(others)})`,
        });
      }
    }
  }
}

/**
 * L1: a dead or paused holder's lock comes free. Returns, per such holder, the ms from its
 * lease's end to the next grant.
 */
function checkL1(history: Checked, options: CheckOptions, flag: Flag): number[] {
  const { ops, grantAt, grantsByName, endOfHistory } = history;
  const takeoverMs: number[] = [];
  const acquiresByName = groupBy(
    ops.filter((op) => op.f === 'acquire'),
    (op) => op.name,
  );
  for (const fault of history.faults) {
    if (fault.phase !== 'start' || !fault.holding || !fault.target) continue;
    if (fault.nemesis !== 'client-kill' && fault.nemesis !== 'client-pause') continue;
    const { name } = fault.holding;
    const grant = grantAt(fault.target, name, BigInt(fault.holding.token), fault.t);
    if (!grant) continue;
    // A lease asked with a lock-delay frees its name that much later when it ends uncleanly.
    const freeAt = freedAt(ops, grant, fault.t) + grant.lockDelayMs;
    const others = (acquiresByName.get(name) ?? []).filter((op) => op.proc !== fault.target);
    const contender = others
      .filter((op) => (op.done?.t ?? INF) > freeAt)
      .sort((a, b) => a.invoke.t - b.invoke.t)[0];
    if (!contender) continue;
    const from = Math.max(freeAt, contender.invoke.t);
    const next = (grantsByName.get(name) ?? [])
      .filter((g) => g.token > grant.token)
      .sort((a, b) => a.okT - b.okT)[0];
    if (next) {
      takeoverMs.push(Math.max(0, next.okT - freeAt));
      if (next.okT > from + options.l1BoundMs) {
        flag({
          property: 'L1',
          name,
          t: next.okT,
          message: `after ${fault.nemesis} of ${fault.target} (token ${grant.token}), the next grant came ${Math.round(next.okT - from)} ms after the lock should have been free`,
        });
      }
    } else if (endOfHistory > from + options.l1BoundMs) {
      flag({
        property: 'L1',
        name,
        t: endOfHistory,
        message: `after ${fault.nemesis} of ${fault.target} (token ${grant.token}), nobody got the lock again (${Math.round(endOfHistory - from)} ms)`,
      });
    }
  }
  return takeoverMs;
}

/** When a holder struck at `faultT` stopped holding: its lease's end, or its release if sooner. */
function freedAt(ops: Op[], grant: Grant, faultT: number): number {
  const renewal = grant.renewals.filter((r) => r.okT <= faultT).at(-1) ?? grant.renewals[0]!;
  const leaseEnd = renewal.okT + grant.ttlMs;
  const releasedAt = ops.find(
    (op) =>
      op.f === 'release' &&
      op.proc === grant.proc &&
      op.token === grant.token &&
      op.invoke.t >= grant.okT &&
      op.done?.type === 'ok' &&
      op.done.released === true,
  )?.done?.t;
  return Math.min(leaseEnd, releasedAt ?? INF);
}

/** L4: a lost lease is reported in time. */
function checkL4(history: Checked, options: CheckOptions, flag: Flag): void {
  const { killed, stopped, endOfHistory } = history;
  for (const grant of history.grants) {
    const deadline = Math.max(...grant.renewals.map((r) => r.deadline));
    const due = dueAfterPauses(history.pauses.get(grant.proc) ?? [], deadline, options.l4BoundMs);
    const limit = due + options.l4BoundMs;
    // Released before a report of the loss was due: the holder let go in time (a late event
    // loop may run the release before the deadline's timer; the lease is over either way).
    if ((grant.releaseInvokeT ?? INF) <= limit) continue;
    const gone = Math.min(killed.get(grant.proc) ?? INF, stopped.get(grant.proc) ?? INF);
    if (gone <= limit || endOfHistory <= limit) continue;
    if (grant.lostT !== undefined && grant.lostT <= limit) continue;
    flag({
      property: 'L4',
      name: grant.name,
      t: limit,
      message:
        grant.lostT !== undefined
          ? `${grant.proc} reported token ${grant.token} lost ${Math.round(grant.lostT - due)} ms after its deadline`
          : `${grant.proc} never reported token ${grant.token} lost (deadline passed${grant.releaseInvokeT === undefined ? '' : `, released ${Math.round(grant.releaseInvokeT - deadline)} ms after it`})`,
    });
  }
}

/** A process paused at its deadline can only say so once it runs again. */
function dueAfterPauses(pauses: [number, number][], deadline: number, boundMs: number): number {
  let due = deadline;
  for (let changed = true; changed; ) {
    changed = false;
    for (const [start, end] of pauses) {
      if (start <= due + boundMs && end > due) {
        due = end;
        changed = true;
      }
    }
  }
  return due;
}

function statsOf(history: Checked): CheckStats {
  const { ops, grantAt, resourceEvents } = history;
  const meddled = ops.filter(
    (op) =>
      (op.f === 'release' || op.f === 'extend') &&
      op.token !== undefined &&
      op.done !== undefined &&
      op.done.type !== 'info' &&
      !grantAt(op.proc, op.name, op.token, op.invoke.t),
  );
  return {
    ops: ops.length,
    okOps: ops.filter((op) => op.done?.type === 'ok').length,
    grants: history.grants.length,
    writes: history.ackedWrites.length,
    staleRefused: resourceEvents.length
      ? resourceEvents.filter((e) => !e.accepted).length
      : ops.filter((op) => (op.f === 'read' || op.f === 'write') && op.done?.type === 'fail')
          .length,
    unknown: ops.filter((op) => !op.done || op.done.type === 'info').length,
    lost: history.lostEvents.length,
    faults: history.faults.filter((fault) => fault.phase === 'start').length,
    meddling: {
      answered: meddled.length,
      // NOT_HOLDER: a meddler records it as fail; a client's release reports released false.
      refused: meddled.filter(
        (op) => op.done?.type === 'fail' || (op.f === 'release' && op.done?.released === false),
      ).length,
    },
  };
}

/**
 * Per fault, ms from its end to the next acknowledged write (null: none before the end); in a
 * history without writes (a semaphore's holders only hold), to the next grant.
 */
function recoveryOf({ faults, ackedWrites, grants }: Checked): (number | null)[] {
  const progress = ackedWrites.length
    ? ackedWrites.map((op) => op.done!.t)
    : grants.map((grant) => grant.okT);
  const writesByOk = progress.sort((a, b) => a - b);
  return faults
    .filter((fault) => fault.phase === 'end')
    .map((fault) => {
      const next = writesByOk.find((t) => t > fault.t);
      return next === undefined ? null : next - fault.t;
    });
}

function firstGrantOf({ faults, grants }: Checked): (number | null)[] {
  return faults
    .filter((fault) => fault.phase === 'start')
    .map((fault) => {
      const after = grants.filter((grant) => grant.invokeT >= fault.t).map((grant) => grant.okT);
      return after.length ? Math.min(...after) - fault.t : null;
    });
}

function doubleGrantsOf({ ops, grantsByName }: Checked): number {
  const releases = ops.filter(
    (op) => op.f === 'release' && (op.done === undefined || op.done.type !== 'fail'),
  );
  let count = 0;
  for (const [name, grants] of grantsByName) {
    const sorted = [...grants].sort((a, b) => a.okT - b.okT);
    for (let i = 1; i < sorted.length; i++) {
      const next = sorted[i]!;
      const earlier = sorted
        .slice(0, i)
        .filter((g) => g.token !== next.token && conflicting(g, next));
      const stillHeld = earlier.some(
        (g) =>
          next.okT < g.invokeT + g.ttlMs &&
          !releases.some(
            (op) => op.name === name && op.token === g.token && op.invoke.t < next.okT,
          ),
      );
      if (stillHeld) count++;
    }
  }
  return count;
}

/** Checks a merged history (see `readHistoryDir`) against S1–S7, L1 and L4. */
export function checkHistory(events: HistoryEvent[], options: CheckOptions): CheckResult {
  const violations: Violation[] = [];
  const flag: Flag = (violation) => violations.push(violation);
  const history = readHistory(events);
  checkS1(history, flag);
  checkS2(history, flag);
  checkS3(history, options, flag);
  checkS4(history, flag);
  checkS5S6(history, flag);
  checkS7(history, flag);
  checkS9(history, flag);
  checkS10(history, flag);
  const takeoverMs = checkL1(history, options, flag);
  checkL4(history, options, flag);
  const counts = Object.fromEntries(PROPERTIES.map((p) => [p, 0])) as Record<Property, number>;
  for (const violation of violations) counts[violation.property] += violation.count ?? 1;
  return {
    violations,
    counts,
    stats: statsOf(history),
    recoveryMs: recoveryOf(history),
    takeoverMs,
    firstGrantMs: firstGrantOf(history),
    doubleGrants: doubleGrantsOf(history),
  };
}
