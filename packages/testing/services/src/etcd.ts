import { join } from 'node:path';
import { askRunning, memberSet } from './members.js';
import * as proc from './process.js';

/**
 * etcd for tests: one member or a cluster, each member a `ManagedProcess` on free loopback
 * ports with its own data dir, so a test can kill -9 one, pause it, or start it again with its
 * data. `DLM_TEST_ETCD_ENDPOINTS` (comma-separated `http://host:port`) points the tests at the
 * user's own etcd instead; then there are no members to kill.
 */

export interface EtcdMember {
  /** The member's `--name` (`n1`, `n2`, …). */
  readonly name: string;
  /** `http://127.0.0.1:PORT`: what clients connect to. */
  readonly clientUrl: string;
  readonly peerUrl: string;
  readonly dataDir: string;
  readonly process: proc.ManagedProcess;
}

export interface EtcdService {
  /** Client URLs of every member, for `new Etcd3({ hosts })` or `etcdBackend({ endpoints })`. */
  readonly endpoints: string[];
  /** Empty when the service comes from `DLM_TEST_ETCD_ENDPOINTS`. */
  readonly members: EtcdMember[];
  /** True when the service comes from `DLM_TEST_ETCD_ENDPOINTS` (not ours to stop or kill). */
  readonly external: boolean;
  /** The member that leads right now, or undefined when none answers as leader. */
  leader(): Promise<EtcdMember | undefined>;
  /** Resolves once some running member reports a leader (after kills and restarts). */
  waitForLeader(timeoutMs?: number): Promise<EtcdMember>;
  /** Kills every member (SIGKILL) and forgets them. Safe to call twice. */
  stop(): Promise<void>;
}

export interface EtcdOptions {
  /** Raft heartbeat, ms (etcd's default 100). */
  heartbeatIntervalMs?: number;
  /** Raft election timeout, ms (etcd's default 1000). Also sets etcd's minimum lease TTL. */
  electionTimeoutMs?: number;
}

const ENV = 'DLM_TEST_ETCD_ENDPOINTS';

function externalEndpoints(): string[] | undefined {
  const value = process.env[ENV]?.trim();
  if (!value) return undefined;
  return value
    .split(',')
    .map((url) => url.trim())
    .filter(Boolean)
    .map((url) => (/^https?:\/\//.test(url) ? url : `http://${url}`));
}

/** `/health` answers `{"health":"true"}` only when the member sees a leader and quorum. */
async function healthy(clientUrl: string): Promise<boolean> {
  try {
    const response = await fetch(`${clientUrl}/health`, { signal: AbortSignal.timeout(1_000) });
    const body = (await response.json()) as { health?: unknown };
    return body.health === 'true' || body.health === true;
  } catch {
    return false;
  }
}

interface MemberStatus {
  memberId: string;
  leaderId: string;
}

/**
 * The member's view of who leads, from the gRPC gateway's maintenance status (which, unlike
 * `etcdctl endpoint status -w json`, prints the uint64 ids as strings, so they survive
 * JSON.parse exactly).
 */
async function status(clientUrl: string): Promise<MemberStatus | undefined> {
  try {
    const response = await fetch(`${clientUrl}/v3/maintenance/status`, {
      method: 'POST',
      body: '{}',
      signal: AbortSignal.timeout(1_000),
    });
    const body = (await response.json()) as {
      header?: { member_id?: string };
      leader?: string;
    };
    const memberId = body.header?.member_id;
    const leaderId = body.leader;
    if (typeof memberId !== 'string' || typeof leaderId !== 'string') return undefined;
    return { memberId, leaderId };
  } catch {
    return undefined;
  }
}

async function findLeader(members: EtcdMember[]): Promise<EtcdMember | undefined> {
  const statuses = await askRunning(members, (member) => status(member.clientUrl));
  const leaderIds = new Set(
    statuses.flatMap(({ answer }) => (answer && answer.leaderId !== '0' ? [answer.leaderId] : [])),
  );
  return statuses.find(({ answer }) => answer && leaderIds.has(answer.memberId))?.member;
}

function service(endpoints: string[], members: EtcdMember[], external: boolean): EtcdService {
  return { endpoints, external, ...memberSet(members, findLeader, 'etcd', 20_000) };
}

export interface EtcdMemberSpec {
  readonly name: string;
  readonly clientUrl: string;
  readonly peerUrl: string;
  readonly dataDir: string;
}

/**
 * The members of a new cluster of `size` (names, free loopback ports, data dirs from
 * `dataDir`), and `args`: etcd's flags for one of them, the same for a process and a container.
 */
export async function planEtcdCluster(
  size: number,
  options: EtcdOptions,
  dataDir: (name: string) => string,
): Promise<{ specs: EtcdMemberSpec[]; args: (spec: EtcdMemberSpec) => string[] }> {
  const token = `dlm-${process.pid}-${Date.now()}`;
  const specs: EtcdMemberSpec[] = [];
  for (let i = 1; i <= size; i++) {
    specs.push({
      name: `n${i}`,
      clientUrl: `http://127.0.0.1:${await proc.freePort()}`,
      peerUrl: `http://127.0.0.1:${await proc.freePort()}`,
      dataDir: dataDir(`n${i}`),
    });
  }
  const initialCluster = specs.map((spec) => `${spec.name}=${spec.peerUrl}`).join(',');
  const timing = [
    ...(options.heartbeatIntervalMs
      ? ['--heartbeat-interval', `${options.heartbeatIntervalMs}`]
      : []),
    ...(options.electionTimeoutMs ? ['--election-timeout', `${options.electionTimeoutMs}`] : []),
  ];
  const args = (spec: EtcdMemberSpec) => [
    '--name',
    spec.name,
    '--data-dir',
    spec.dataDir,
    '--listen-client-urls',
    spec.clientUrl,
    '--advertise-client-urls',
    spec.clientUrl,
    '--listen-peer-urls',
    spec.peerUrl,
    '--initial-advertise-peer-urls',
    spec.peerUrl,
    '--initial-cluster',
    initialCluster,
    '--initial-cluster-state',
    'new',
    '--initial-cluster-token',
    token,
    '--logger',
    'zap',
    '--log-level',
    'warn',
    ...timing,
  ];
  return { specs, args };
}

async function startMembers(size: number, options: EtcdOptions): Promise<EtcdService> {
  const external = externalEndpoints();
  if (external) return service(external, [], true);
  const root = proc.tempDir('etcd');
  const { specs, args } = await planEtcdCluster(size, options, (name) => join(root, name));
  // Members of a new cluster only become healthy once a quorum of them runs: start all at once.
  const members = await proc.allStarted(
    specs.map(async (spec): Promise<EtcdMember> => {
      const managed = await proc.startProcess({
        name: `etcd ${spec.name}`,
        command: 'etcd',
        args: args(spec),
        ready: () => healthy(spec.clientUrl),
      });
      return { ...spec, process: managed };
    }),
    (member) => member.process.kill(),
  );
  return service(
    members.map((member) => member.clientUrl),
    members,
    false,
  );
}

/**
 * One etcd member on free loopback ports in a temp dir (or the user's etcd from
 * `DLM_TEST_ETCD_ENDPOINTS`). Resolves once it answers `/health`.
 *
 * @example
 * const etcd = await startEtcd();
 * afterAll(() => etcd.stop());
 * const backend = etcdBackend({ endpoints: etcd.endpoints });
 */
export function startEtcd(options: EtcdOptions = {}): Promise<EtcdService> {
  return startMembers(1, options);
}

/**
 * A cluster of `size` members (3 by default), resolved once every member reports healthy
 * (a leader is elected). `member.process.start()` after a kill waits for that member's
 * `/health`, which needs a quorum: when a majority was killed, start them again together
 * (`Promise.all`).
 */
export function startEtcdCluster(size = 3, options: EtcdOptions = {}): Promise<EtcdService> {
  return startMembers(size, options);
}

// For the container provider (etcd-container.ts), which builds the same service over containers.
export { healthy as etcdHealthy, service as etcdService };
