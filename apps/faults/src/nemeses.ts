import type { ManagedProcess } from '@dlm/test-services';
import type { FaultEvent } from './history.js';
import type { ProxyMode, TcpProxy } from './tcp-proxy.js';
import { sleep } from './time.js';
import type { BackendVariant, Member, Topology } from './topology.js';
import type { WorkerStatus } from './worker-config.js';

/** A workload process as the nemesis sees it. */
export interface WorkerHandle {
  proc: string;
  process: ManagedProcess;
  /** Its own proxy to the dlm server: the client ↔ server link. */
  proxy: TcpProxy;
  status(): WorkerStatus | undefined;
}

/** What a nemesis may act on during a segment. */
export interface NemesisContext {
  ttlMs: number;
  topology: Topology;
  server: ManagedProcess;
  /** Sends a clock command to the dlm server (`{ jumpMs }` or `{ rate }`). */
  clock(command: { jumpMs?: number; rate?: number }): Promise<void>;
  workers(): WorkerHandle[];
  /** Kills nothing; starts a new process in place of a dead worker (new proc id, same proxy). */
  replaceWorker(worker: WorkerHandle): Promise<void>;
  /** Records the start of a fault; call the result to record its end. */
  fault(start: Omit<FaultEvent, 'kind' | 't' | 'proc' | 'id' | 'phase'>): () => void;
  /** Records what happened to a worker process (pause, resume, kill). */
  processEvent(target: string, what: 'pause' | 'resume' | 'kill'): void;
}

export interface Nemesis {
  name: string;
  /** What it does, for the report. */
  description: string;
  appliesTo(variant: BackendVariant): boolean;
  /** Injects the n-th fault (n = 0, 1, …) and heals it; resolves once healed. */
  inject(context: NemesisContext, n: number): Promise<void>;
}

const cycle = <T>(values: T[], n: number): T => values[n % values.length]!;
const random = <T>(values: T[]): T | undefined => values[Math.floor(Math.random() * values.length)];

/**
 * A worker that holds a lock now, preferring one that has read and not yet written (a pause
 * there leaves a stale write behind). Waits up to `waitMs` for one; falls back to any worker.
 */
async function pickHolder(
  context: NemesisContext,
  waitMs = 3_000,
): Promise<{ worker: WorkerHandle; holding: { name: string; token: string } | undefined }> {
  const deadline = performance.now() + waitMs;
  let anyHolder: WorkerHandle | undefined;
  for (;;) {
    const live = context.workers().filter((worker) => worker.process.running);
    const holders = live.filter((worker) => worker.status()?.holding);
    const afterRead = holders.filter((worker) => worker.status()?.holding?.phase === 'read');
    anyHolder = random(holders) ?? anyHolder;
    const chosen = random(afterRead) ?? (performance.now() > deadline ? anyHolder : undefined);
    if (chosen) {
      const holding = chosen.status()?.holding;
      return {
        worker: chosen,
        holding: holding ? { name: holding.name, token: holding.token } : undefined,
      };
    }
    if (performance.now() > deadline) return { worker: random(live)!, holding: undefined };
    await sleep(10);
  }
}

const ALL = () => true;
const SENTINEL = (variant: BackendVariant) => variant.startsWith('redis-sentinel');
const REDIS_CLUSTER = (variant: BackendVariant) => variant.startsWith('redis-cluster');
/**
 * Backends behind the harness's proxies: Sentinel hands out the servers' own addresses, and a
 * Redis Cluster's clients connect to the addresses its nodes advertise (see topology.ts).
 */
const EXTERNAL = (variant: BackendVariant) =>
  variant !== 'embedded' && !REDIS_CLUSTER(variant) && !SENTINEL(variant);
const SINGLE_OR_REDLOCK = (variant: BackendVariant) =>
  variant === 'redis' ||
  variant === 'redis-noaof' ||
  variant === 'redlock' ||
  variant === 'postgres';
const CLUSTER = (variant: BackendVariant) => variant === 'etcd' || variant === 'zookeeper';

async function restartMember(context: NemesisContext, member: Member, downMs: number) {
  await member.process.kill();
  await sleep(downMs);
  await member.process.start();
  await context.topology.settled();
}

/** SIGSTOPs `process` for `factor` × TTL, then SIGCONTs it. */
async function pauseFor(context: NemesisContext, process: ManagedProcess, factor: number) {
  process.pause();
  await sleep(factor * context.ttlMs);
  process.resume();
}

type FaultStart = Parameters<NemesisContext['fault']>[0];

/**
 * Records `start` as a fault that lasts while `action` injects and heals it, and returns what
 * `action` returns. A fault whose action throws is left without an end: it did not heal.
 */
async function withFault<T>(
  context: NemesisContext,
  start: FaultStart,
  action: () => Promise<T>,
): Promise<T> {
  const end = context.fault(start);
  const result = await action();
  end();
  return result;
}

/** A fault on a holder picked by `pickHolder`: its target, and the lock it held if it held one. */
function holderFault(
  nemesis: string,
  { worker, holding }: Awaited<ReturnType<typeof pickHolder>>,
): FaultStart {
  return { nemesis, target: worker.proc, ...(holding ? { holding } : {}) };
}

/** The detail of a pause fault that lasts `factor` × TTL. */
const pauseDetail = (factor: number) => `${factor}×TTL`;

function clientPause(): Nemesis {
  return {
    name: 'client-pause',
    description:
      'SIGSTOP a lock holder (just after its read) for 2, 0.5, 1 and 10 × TTL, then SIGCONT',
    appliesTo: ALL,
    async inject(context, n) {
      const factor = cycle([2, 0.5, 1, 10], n);
      const picked = await pickHolder(context);
      const { worker } = picked;
      const start = { ...holderFault('client-pause', picked), detail: pauseDetail(factor) };
      await withFault(context, start, async () => {
        context.processEvent(worker.proc, 'pause');
        await pauseFor(context, worker.process, factor);
        context.processEvent(worker.proc, 'resume');
      });
    },
  };
}

function clientKill(): Nemesis {
  return {
    name: 'client-kill',
    description: 'kill -9 a lock holder; a new worker process takes its place',
    appliesTo: ALL,
    async inject(context, _n) {
      const picked = await pickHolder(context);
      const { worker } = picked;
      await withFault(context, holderFault('client-kill', picked), async () => {
        context.processEvent(worker.proc, 'kill');
        await worker.process.kill();
        await sleep(300);
        await context.replaceWorker(worker);
      });
    },
  };
}

function serverKill(): Nemesis {
  return {
    name: 'server-kill',
    description: 'kill -9 the dlm server, restart it after 1 s (embedded: same data dir)',
    appliesTo: ALL,
    async inject(context) {
      await withFault(context, { nemesis: 'server-kill', target: 'server' }, async () => {
        await context.server.kill();
        await sleep(1_000);
        await context.server.start();
      });
    },
  };
}

function serverPause(): Nemesis {
  return {
    name: 'server-pause',
    description: 'SIGSTOP the dlm server for 0.5 and 1.5 × TTL',
    appliesTo: ALL,
    async inject(context, n) {
      const factor = cycle([0.5, 1.5], n);
      const start = { nemesis: 'server-pause', target: 'server', detail: pauseDetail(factor) };
      await withFault(context, start, () => pauseFor(context, context.server, factor));
    },
  };
}

function backendKill(): Nemesis {
  return {
    name: 'backend-kill',
    description: 'kill -9 the Redis (a random Redlock node, the PostgreSQL), restart it after 1 s',
    appliesTo: SINGLE_OR_REDLOCK,
    async inject(context) {
      const member = random(context.topology.members)!;
      await withFault(context, { nemesis: 'backend-kill', target: member.id }, () =>
        restartMember(context, member, 1_000),
      );
    },
  };
}

function backendPause(): Nemesis {
  return {
    name: 'backend-pause',
    description:
      'SIGSTOP the Redis (a random Redlock node, PostgreSQL and its backends) for 0.5, 1.5 and 3 × TTL',
    appliesTo: SINGLE_OR_REDLOCK,
    async inject(context, n) {
      const factor = cycle([0.5, 1.5, 3], n);
      const member = random(context.topology.members)!;
      const start = { nemesis: 'backend-pause', target: member.id, detail: pauseDetail(factor) };
      await withFault(context, start, () => pauseFor(context, member.process, factor));
    },
  };
}

/**
 * Redis Cluster: kill -9 the master of a held lock's name (its replica takes over after
 * `cluster-node-timeout`), restart it 1 s later; it rejoins, empty, as a replica. The fault
 * lasts until every slot is served again.
 */
function majorityKill(): Nemesis {
  return {
    name: 'majority-kill',
    description: 'kill -9 two of the three Redlock nodes at once, restart them after 1 s',
    appliesTo: (variant) => variant === 'redlock',
    async inject(context) {
      const members = [...context.topology.members].sort(() => Math.random() - 0.5).slice(0, 2);
      const target = members.map((member) => member.id).join('+');
      await withFault(context, { nemesis: 'majority-kill', target }, async () => {
        await Promise.all(members.map((member) => member.process.kill()));
        await sleep(1_000);
        await Promise.all(members.map((member) => member.process.start()));
      });
    },
  };
}

/**
 * kill -9 the Redis master of a held lock's name: Sentinel's master, or the Cluster master of
 * the name's slot. Every other time, where the topology can, 300 ms after pointing the
 * replicas at a dead port first (lagging replicas: the master's last writes reach none of
 * them). The fault lasts until a replica is promoted; then the old master restarts empty and
 * rejoins as a replica.
 */
function masterKill(): Nemesis {
  return {
    name: 'master-kill',
    description:
      "kill -9 the Redis master of a held lock's name (Sentinel's, or the Cluster master of its slot; every other time 300 ms after breaking its replication links where the topology can: lagging replicas); a replica is promoted; the old master restarts empty and rejoins",
    appliesTo: (variant) => SENTINEL(variant) || REDIS_CLUSTER(variant),
    async inject(context, n) {
      const { topology } = context;
      if (!topology.masterOf) throw new Error('master-kill needs a replicated Redis');
      const name = (await pickHolder(context)).holding?.name ?? 'any';
      const master = await topology.masterOf(name);
      const lagging = n % 2 === 1 && topology.detachReplicas !== undefined;
      if (lagging) {
        await topology.detachReplicas?.();
        await sleep(300);
      }
      // The fault starts with the kill: the time to the next grant is the failover's.
      const start = {
        nemesis: 'master-kill',
        target: master.id,
        detail: lagging ? 'lagging replicas' : 'replicas in sync',
      };
      const failedOver = await withFault(context, start, async () => {
        await master.process.kill();
        return promoted(() => topology.masterOf!(name), master, PROMOTION_MS);
      });
      await master.process.start();
      await topology.settled();
      if (!failedOver) {
        throw new Error(`no replica promoted within ${PROMOTION_MS} ms (the old master restarted)`);
      }
    },
  };
}

/** How long master-kill waits for a promotion before it restarts the old master anyway. */
const PROMOTION_MS = 15_000;

/** Whether `masterOf` names another member than `old` (a replica promoted) within `ms`. */
async function promoted(
  masterOf: () => Promise<Member>,
  old: Member,
  ms: number,
): Promise<boolean> {
  const deadline = performance.now() + ms;
  for (;;) {
    const now = await masterOf().catch(() => undefined);
    if (now !== undefined && now !== old) return true;
    if (performance.now() > deadline) return false;
    await sleep(100);
  }
}

async function pickMember(context: NemesisContext, role: 'leader' | 'follower') {
  const leader = await context.topology.leader();
  if (role === 'leader') return leader ?? random(context.topology.members)!;
  return random(context.topology.members.filter((member) => member !== leader))!;
}

function memberKill(role: 'leader' | 'follower'): Nemesis {
  return {
    name: `${role}-kill`,
    description: `kill -9 the ${role} of the 3-member cluster, restart it after 1 s`,
    appliesTo: CLUSTER,
    async inject(context) {
      const member = await pickMember(context, role);
      await withFault(context, { nemesis: `${role}-kill`, target: member.id }, () =>
        restartMember(context, member, 1_000),
      );
    },
  };
}

function memberPause(role: 'leader' | 'follower'): Nemesis {
  return {
    name: `${role}-pause`,
    description: `SIGSTOP the ${role} of the 3-member cluster for 1 and 3 × TTL`,
    appliesTo: CLUSTER,
    async inject(context, n) {
      const factor = cycle([1, 3], n);
      const member = await pickMember(context, role);
      const start = { nemesis: `${role}-pause`, target: member.id, detail: pauseDetail(factor) };
      await withFault(context, start, async () => {
        await pauseFor(context, member.process, factor);
        await context.topology.settled();
      });
    },
  };
}

type NetFault = 'drop' | 'blackhole' | 'delay' | 'delay-long' | 'reset';

function netMode(fault: NetFault, ttlMs: number): { mode: ProxyMode; windowMs: number } {
  switch (fault) {
    case 'drop':
      return { mode: { kind: 'drop' }, windowMs: 2 * ttlMs };
    case 'blackhole':
      return { mode: { kind: 'blackhole' }, windowMs: 2 * ttlMs };
    case 'delay':
      return { mode: { kind: 'delay', meanMs: 75, jitterMs: 50 }, windowMs: 3 * ttlMs };
    case 'delay-long':
      return { mode: { kind: 'delay', meanMs: 1.5 * ttlMs, jitterMs: 0 }, windowMs: 2 * ttlMs };
    case 'reset':
      return { mode: { kind: 'reset' }, windowMs: 1_000 };
  }
}

const NET_DESCRIPTION: Record<NetFault, string> = {
  drop: 'drop both ways (partition) for 2 × TTL',
  blackhole: 'requests arrive, replies are lost, for 2 × TTL',
  delay: 'delay every chunk 75 ± 50 ms for 3 × TTL',
  'delay-long': 'delay every chunk 1.5 × TTL for 2 × TTL',
  reset: 'reset every connection (and new ones for 1 s)',
};

function clientNet(fault: NetFault): Nemesis {
  return {
    name: `client-net-${fault}`,
    description: `one client ↔ server link (a holder's): ${NET_DESCRIPTION[fault]}`,
    appliesTo: ALL,
    async inject(context) {
      const picked = await pickHolder(context, 1_000);
      const { proxy } = picked.worker;
      const { mode, windowMs } = netMode(fault, context.ttlMs);
      await withFault(context, holderFault(`client-net-${fault}`, picked), async () => {
        proxy.setMode(mode);
        await sleep(windowMs);
        proxy.heal();
      });
    },
  };
}

function backendNet(fault: NetFault): Nemesis {
  return {
    name: `backend-net-${fault}`,
    description: `every server ↔ backend link: ${NET_DESCRIPTION[fault]}`,
    appliesTo: EXTERNAL,
    async inject(context) {
      const { mode, windowMs } = netMode(fault, context.ttlMs);
      const start = { nemesis: `backend-net-${fault}`, target: 'backend-links' };
      await withFault(context, start, async () => {
        for (const proxy of context.topology.proxies) proxy.setMode(mode);
        await sleep(windowMs);
        for (const proxy of context.topology.proxies) proxy.heal();
      });
    },
  };
}

function clockJump(): Nemesis {
  return {
    name: 'clock-jump',
    description: "the dlm server's clock jumps 2 × TTL forward, or stands still for 1 × TTL",
    appliesTo: ALL,
    async inject(context, n) {
      if (n % 2 === 0) {
        const start = { nemesis: 'clock-jump', target: 'server', detail: '+2×TTL' };
        await withFault(context, start, () => context.clock({ jumpMs: 2 * context.ttlMs }));
        return;
      }
      const start = { nemesis: 'clock-jump', target: 'server', detail: 'stop 1×TTL' };
      await withFault(context, start, async () => {
        await context.clock({ rate: 0 });
        await sleep(context.ttlMs);
        await context.clock({ rate: 1 });
      });
    },
  };
}

/**
 * adapter-redis's tokens assume the Redis server's clock never steps back by more than
 * `fenceRetentionMs` (60 s by default): each fault steps it back 1 s more, staying inside.
 */
function backendClockBack(): Nemesis {
  return {
    name: 'backend-clock-back',
    description:
      "the Redis server's wall clock (every Redlock node's alike) steps back 1 s more each time, staying within the fence retention (60 s)",
    appliesTo: SINGLE_OR_REDLOCK,
    async inject(context, n) {
      const { wallClock } = context.topology;
      if (!wallClock) throw new Error('no C compiler on PATH: the Redis clock cannot be moved');
      const offsetMs = -1_000 * (n + 1);
      if (offsetMs < -30_000) return; // half the retention: enough steps
      const start = {
        nemesis: 'backend-clock-back',
        target: 'redis',
        detail: `${offsetMs / 1_000} s`,
      };
      await withFault(context, start, async () => {
        wallClock.set(offsetMs);
        await sleep(context.ttlMs);
      });
    },
  };
}

function clockSkew(): Nemesis {
  return {
    name: 'clock-skew',
    description: "the dlm server's clock runs 2× fast, or 0.5× slow, for 3 × TTL",
    appliesTo: ALL,
    async inject(context, n) {
      const rate = cycle([2, 0.5], n);
      const start = { nemesis: 'clock-skew', target: 'server', detail: `rate ${rate}` };
      await withFault(context, start, async () => {
        await context.clock({ rate });
        await sleep(3 * context.ttlMs);
        await context.clock({ rate: 1 });
      });
    },
  };
}

/** No fault at all: the baseline. */
function none(): Nemesis {
  return {
    name: 'none',
    description: 'no faults (baseline)',
    appliesTo: ALL,
    async inject() {},
  };
}

export const NEMESES: Nemesis[] = [
  none(),
  clientPause(),
  clientKill(),
  serverKill(),
  serverPause(),
  backendKill(),
  backendPause(),
  majorityKill(),
  masterKill(),
  memberKill('leader'),
  memberPause('leader'),
  memberKill('follower'),
  memberPause('follower'),
  ...(['drop', 'blackhole', 'delay', 'delay-long', 'reset'] as const).map(clientNet),
  ...(['drop', 'blackhole', 'delay', 'delay-long', 'reset'] as const).map(backendNet),
  clockJump(),
  clockSkew(),
  backendClockBack(),
];

export function nemesisNamed(name: string): Nemesis | undefined {
  return NEMESES.find((nemesis) => nemesis.name === name);
}
