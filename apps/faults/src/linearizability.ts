/**
 * A linearizability checker for try-acquire / release / get histories, in the style of Wing &
 * Gong as Knossos and porcupine use it: search for a total order of the operations that keeps
 * each operation's real-time interval (an operation that completed before another was invoked
 * comes first) and that the sequential specification accepts. Operations whose reply was lost
 * may have taken effect or not; both are tried. The search is per lock name (linearizability is
 * local), memoizes (prefix, state) pairs, and gives up after `maxStates` as inconclusive.
 *
 * The sequential specification, per name: the lock is free or held by one token; a grant's
 * token is above every earlier grant's; try-acquire on a free lock grants, on a held one says
 * LOCK_HELD; release(token) frees the lock when that token holds it and says "not released"
 * otherwise; get reports the holder's token or free. A lease also ends on its own (expiry),
 * but never before its acquire was invoked plus `expiryAfterMs` (the lease asked for less a
 * margin): the backend's lease starts after the request was sent and lasts at least that long.
 * A grant by an acquire whose outcome is unknown may end at any time: the client releases a
 * grant its caller never received in the background (a release that failed is retried there
 * too, so the workload records it as unknown).
 */

/** One event a lock workload process records (JSONL, as the other histories). */
export interface LockOpEvent {
  kind: 'lock';
  t: number;
  proc: string;
  /** Per process; an operation's invoke and completion share it. */
  op: number;
  f: LockOpName;
  type: 'invoke' | 'ok' | 'fail' | 'info';
  name: string;
  /** acquire ok: the token granted; release: the token presented; get ok: the holder's. */
  token?: string;
  /** release ok: whether the server freed the lock. */
  released?: boolean;
  /** get ok: whether the lock is held (then `token` says by whom). */
  held?: boolean;
  /** fail/info: the error code and message. */
  error?: string;
}

export type LockOpName = 'acquire' | 'release' | 'get';

/** What an operation observed; `unknown`: it may or may not have taken effect. */
export type LockOpResult =
  | { f: 'acquire'; outcome: 'granted'; token: bigint }
  | { f: 'acquire'; outcome: 'held' }
  | { f: 'acquire'; outcome: 'unknown' }
  | { f: 'release'; outcome: 'released' | 'not-held' | 'unknown'; token: bigint }
  | { f: 'get'; outcome: 'held'; token: bigint }
  | { f: 'get'; outcome: 'free' };

export interface LockOp {
  proc: string;
  name: string;
  invoke: number;
  /**
   * When it completed; for an unknown outcome, the latest time it can still take effect (its
   * last known time plus `unknownHorizonMs`).
   */
  complete: number;
  result: LockOpResult;
}

export interface LinearizabilityOptions {
  /** A lease cannot end on its own before its acquire's invoke plus this. */
  expiryAfterMs: number;
  /** How long after its last known time an operation with a lost reply may still take effect. */
  unknownHorizonMs: number;
  /** Search bound per name: (prefix, state) pairs visited. Default 200 000. */
  maxStates?: number;
}

export interface NameVerdict {
  name: string;
  ops: number;
  verdict: 'linearizable' | 'not-linearizable' | 'inconclusive';
  /** Pairs visited. */
  states: number;
  /** not-linearizable: the operations none of which could come next, at the furthest point. */
  message?: string;
  /** not-linearizable: when (the earliest of those operations' invoke times). */
  t?: number;
}

export interface LinearizabilityResult {
  names: NameVerdict[];
  ops: number;
  /** Operations whose outcome is unknown. */
  unknown: number;
  violations: number;
  inconclusive: number;
}

/** Turns recorded events into operations; failures that certainly had no effect are dropped. */
export function lockOpsFromEvents(
  events: readonly LockOpEvent[],
  options: Pick<LinearizabilityOptions, 'unknownHorizonMs'>,
): LockOp[] {
  const invokes = new Map<string, LockOpEvent>();
  const completions = new Map<string, LockOpEvent>();
  for (const event of events) {
    if (event.kind !== 'lock') continue;
    const key = `${event.proc}#${event.op}`;
    if (event.type === 'invoke') invokes.set(key, event);
    else completions.set(key, event);
  }
  const ops: LockOp[] = [];
  for (const [key, invoked] of invokes) {
    const done = completions.get(key);
    const unknownUntil = (done?.t ?? invoked.t) + options.unknownHorizonMs;
    const base = { proc: invoked.proc, name: invoked.name, invoke: invoked.t };
    const lost = done === undefined || done.type === 'info';
    if (invoked.f === 'acquire') {
      if (lost)
        ops.push({ ...base, complete: unknownUntil, result: { f: 'acquire', outcome: 'unknown' } });
      else if (done.type === 'ok' && done.token !== undefined) {
        ops.push({
          ...base,
          complete: done.t,
          result: { f: 'acquire', outcome: 'granted', token: BigInt(done.token) },
        });
      } else if (done.type === 'fail' && done.error?.startsWith('LOCK_HELD')) {
        ops.push({ ...base, complete: done.t, result: { f: 'acquire', outcome: 'held' } });
      }
    } else if (invoked.f === 'release' && invoked.token !== undefined) {
      const token = BigInt(invoked.token);
      if (lost) {
        ops.push({
          ...base,
          complete: unknownUntil,
          result: { f: 'release', outcome: 'unknown', token },
        });
      } else if (done.type === 'ok') {
        const outcome = done.released ? 'released' : 'not-held';
        ops.push({ ...base, complete: done.t, result: { f: 'release', outcome, token } });
      }
    } else if (invoked.f === 'get' && done?.type === 'ok') {
      // A read whose reply was lost changed nothing: dropped like a failure.
      const result: LockOpResult =
        done.held && done.token !== undefined
          ? { f: 'get', outcome: 'held', token: BigInt(done.token) }
          : { f: 'get', outcome: 'free' };
      ops.push({ ...base, complete: done.t, result });
    }
  }
  return ops;
}

/**
 * The specification's state. A holder granted by an operation whose reply was lost has a token
 * nobody saw: `token` undefined, known only to be above `floor`, until a read names it.
 */
interface Model {
  holder: { token: bigint | undefined; floor: bigint; endsAfter: number } | null;
  /** Every earlier grant's token is ≤ this (a lower bound where a token is unknown). */
  max: bigint;
}

/** The larger of two tokens (Math.max does not take bigints). */
function larger(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

function modelKey(model: Model): string {
  const { holder } = model;
  if (!holder) return `-|${model.max}`;
  return `${holder.token ?? `?${holder.floor}`}|${holder.endsAfter}|${model.max}`;
}

/** The states `op` can lead to from `model` (none: it cannot come next). */
function step(
  model: Model,
  op: LockOp,
  known: ReadonlySet<bigint>,
  options: LinearizabilityOptions,
): Model[] {
  // Before the operation takes effect the lease may have ended on its own, if the operation's
  // point (at the latest, its completion) can lie after the lease's earliest end.
  const before: Model[] = [model];
  if (model.holder && model.holder.endsAfter < op.complete) {
    const { holder } = model;
    // An unseen token is above its floor: at least floor + 1.
    before.push({ holder: null, max: larger(model.max, holder.token ?? holder.floor + 1n) });
  }
  const next: Model[] = [];
  const { result } = op;
  for (const state of before) {
    const { holder } = state;
    switch (result.f) {
      case 'acquire':
        if (result.outcome === 'granted') {
          if (!holder && result.token > state.max) {
            next.push({
              holder: {
                token: result.token,
                floor: state.max,
                endsAfter: op.invoke + options.expiryAfterMs,
              },
              max: result.token,
            });
          }
        } else if (result.outcome === 'held') {
          if (holder) next.push(state);
        } else {
          next.push(state);
          if (!holder) {
            // A grant whose caller never saw it may end at any time: the client gives it back
            // in the background (a late grant, a lost reply), besides its expiry.
            next.push({
              holder: {
                token: undefined,
                floor: state.max,
                endsAfter: op.invoke,
              },
              max: state.max,
            });
          }
        }
        break;
      case 'release': {
        const holds = holder !== null && holder.token === result.token;
        if (result.outcome === 'released') {
          if (holds) next.push({ holder: null, max: state.max });
        } else if (result.outcome === 'not-held') {
          if (!holds) next.push(state);
        } else {
          next.push(state);
          if (holds) next.push({ holder: null, max: state.max });
        }
        break;
      }
      case 'get':
        if (result.outcome === 'free') {
          if (!holder) next.push(state);
        } else if (holder?.token === result.token) {
          next.push(state);
        } else if (
          holder &&
          holder.token === undefined &&
          result.token > holder.floor &&
          !known.has(result.token)
        ) {
          // The read names the unseen grant's token.
          const max = larger(result.token, state.max);
          next.push({ holder: { ...holder, token: result.token }, max });
        }
        break;
    }
  }
  return next;
}

interface Node {
  /** Every op below this index is placed. */
  prefix: number;
  /** Ops at or above `prefix` that are placed, ascending. */
  extra: number[];
  model: Model;
}

function describe(op: LockOp): string {
  const { result } = op;
  const what =
    result.f === 'acquire'
      ? result.outcome === 'granted'
        ? `acquire → granted ${result.token}`
        : `acquire → ${result.outcome === 'held' ? 'LOCK_HELD' : 'unknown'}`
      : result.f === 'release'
        ? `release(${result.token}) → ${result.outcome}`
        : result.outcome === 'held'
          ? `get → held by ${result.token}`
          : 'get → free';
  return `${what} (${op.proc}, ${op.invoke.toFixed(1)}–${op.complete.toFixed(1)})`;
}

function describeModel(model: Model): string {
  if (!model.holder) return `free, last token ≤ ${model.max}`;
  return `held by ${model.holder.token ?? `an unseen token > ${model.holder.floor}`}`;
}

/** Checks one name's operations. */
export function checkName(
  name: string,
  input: readonly LockOp[],
  options: LinearizabilityOptions,
): NameVerdict {
  const ops = [...input].sort((a, b) => a.invoke - b.invoke);
  const known = new Set<bigint>();
  for (const op of ops)
    if (op.result.f === 'acquire' && op.result.outcome === 'granted') known.add(op.result.token);
  const maxStates = options.maxStates ?? 200_000;
  const visited = new Set<string>();
  const stack: Node[] = [{ prefix: 0, extra: [], model: { holder: null, max: 0n } }];
  let furthest: { placed: number; node: Node; candidates: number[] } | undefined;

  while (stack.length > 0) {
    const node = stack.pop()!;
    if (node.prefix === ops.length)
      return { name, ops: ops.length, verdict: 'linearizable', states: visited.size };
    const placed = (index: number) => index < node.prefix || node.extra.includes(index);
    // Only an op invoked before every unplaced op's completion can come next.
    let minComplete = Number.POSITIVE_INFINITY;
    let end = node.prefix;
    for (; end < ops.length; end++) {
      if (placed(end)) continue;
      const op = ops[end]!;
      if (op.invoke >= minComplete) break;
      if (op.complete < minComplete) minComplete = op.complete;
    }
    const candidates: number[] = [];
    for (let index = node.prefix; index < end; index++) {
      if (!placed(index) && ops[index]!.invoke < minComplete) candidates.push(index);
    }
    const count = node.prefix + node.extra.length;
    if (!furthest || count > furthest.placed) furthest = { placed: count, node, candidates };
    // Earliest-completing candidates are tried first (pushed last).
    candidates.sort((a, b) => ops[b]!.complete - ops[a]!.complete);
    for (const index of candidates) {
      for (const model of step(node.model, ops[index]!, known, options)) {
        let prefix = node.prefix;
        let extra = [...node.extra, index].sort((a, b) => a - b);
        while (extra[0] === prefix) {
          extra = extra.slice(1);
          prefix += 1;
        }
        const key = `${prefix}:${extra.join(',')}:${modelKey(model)}`;
        if (visited.has(key)) continue;
        visited.add(key);
        if (visited.size > maxStates) {
          return { name, ops: ops.length, verdict: 'inconclusive', states: visited.size };
        }
        stack.push({ prefix, extra, model });
      }
    }
  }

  const stuck = furthest?.candidates.map((index) => ops[index]!) ?? [];
  const t = Math.min(...stuck.map((op) => op.invoke));
  return {
    name,
    ops: ops.length,
    verdict: 'not-linearizable',
    states: visited.size,
    t,
    message: `after ${furthest?.placed ?? 0} of ${ops.length} operations (lock ${describeModel(
      furthest?.node.model ?? { holder: null, max: 0n },
    )}), none of these can come next: ${stuck.map(describe).join('; ')}; before them: ${leadUp(
      ops,
      t,
    )
      .map(describe)
      .join('; ')}`,
  };
}

/**
 * The operations invoked in the last expiry bound or so before `t` (at most 12): what a reader
 * of the report needs to see why none of the stuck operations could come next.
 */
function leadUp(ops: readonly LockOp[], t: number): LockOp[] {
  return ops.filter((op) => op.invoke < t && op.invoke >= t - 3_000).slice(-12);
}

/** Checks every name's operations in a history of lock events. */
export function checkLinearizability(
  events: readonly LockOpEvent[],
  options: LinearizabilityOptions,
): LinearizabilityResult {
  const ops = lockOpsFromEvents(events, options);
  const byName = new Map<string, LockOp[]>();
  for (const op of ops) {
    const list = byName.get(op.name);
    if (list) list.push(op);
    else byName.set(op.name, [op]);
  }
  const names = [...byName.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([name, list]) => checkName(name, list, options));
  return {
    names,
    ops: ops.length,
    unknown: ops.filter((op) => op.result.outcome === 'unknown').length,
    violations: names.filter((n) => n.verdict === 'not-linearizable').length,
    inconclusive: names.filter((n) => n.verdict === 'inconclusive').length,
  };
}
