import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { askRunning, memberSet } from './members.js';
import * as proc from './process.js';

/**
 * ZooKeeper for tests: one server or an ensemble, each member a `ManagedProcess` (a JVM) on
 * free loopback ports with its own data dir. `DLM_TEST_ZK_CONNECT` (`host:port,host:port`)
 * points the tests at the user's own ZooKeeper instead; then there are no members to kill.
 */

export interface ZooKeeperMember {
  /** The member's `myid` (1, 2, 3). */
  readonly id: number;
  readonly clientPort: number;
  /** `127.0.0.1:PORT` */
  readonly connectString: string;
  readonly dataDir: string;
  readonly process: proc.ManagedProcess;
}

export interface ZooKeeperService {
  /** `host:port,host:port,…` for `zookeeperBackend({ connect })`. */
  readonly connectString: string;
  /** Empty when the service comes from `DLM_TEST_ZK_CONNECT`. */
  readonly members: ZooKeeperMember[];
  readonly external: boolean;
  /** The member whose `srvr` says `Mode: leader` (or `standalone`), if any. */
  leader(): Promise<ZooKeeperMember | undefined>;
  /** Resolves once some running member leads (after kills and restarts). */
  waitForLeader(timeoutMs?: number): Promise<ZooKeeperMember>;
  /** Kills every member (SIGKILL). Safe to call twice. */
  stop(): Promise<void>;
}

const ENV = 'DLM_TEST_ZK_CONNECT';
const JARS = '/usr/share/java';
// Debian ships several SLF4J bindings and the first one found (slf4j-nop) drops every line;
// putting slf4j-simple first keeps ZooKeeper's warnings in the process output for diagnosis.
const CLASSPATH = existsSync(`${JARS}/slf4j-simple.jar`)
  ? `${JARS}/slf4j-simple.jar:${JARS}/*`
  : `${JARS}/*`;
const MAIN = 'org.apache.zookeeper.server.quorum.QuorumPeerMain';

function externalConnect(): string | undefined {
  const value = process.env[ENV]?.trim();
  return value ? value : undefined;
}

/**
 * Sends a four-letter word (`ruok`, `srvr`, …) and resolves with the reply; the server closes
 * the connection after answering. Rejects on connection errors or after `timeoutMs`.
 */
export function fourLetterWord(
  host: string,
  port: number,
  word: string,
  timeoutMs = 1_000,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    let reply = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`${word} to ${host}:${port}: no reply in ${timeoutMs} ms`));
    }, timeoutMs);
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(word));
    socket.on('data', (chunk: string) => {
      reply += chunk;
    });
    socket.on('end', () => {
      clearTimeout(timer);
      resolve(reply);
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/** `leader`, `follower`, `standalone`, or undefined when the member does not serve. */
export async function zookeeperMode(port: number, host = '127.0.0.1'): Promise<string | undefined> {
  try {
    const reply = await fourLetterWord(host, port, 'srvr');
    return /^Mode: (\w+)/m.exec(reply)?.[1];
  } catch {
    return undefined;
  }
}

async function findLeader(members: ZooKeeperMember[]): Promise<ZooKeeperMember | undefined> {
  const modes = await askRunning(members, (member) => zookeeperMode(member.clientPort));
  return modes.find(({ answer }) => answer === 'leader' || answer === 'standalone')?.member;
}

function service(
  connectString: string,
  members: ZooKeeperMember[],
  external: boolean,
): ZooKeeperService {
  return { connectString, external, ...memberSet(members, findLeader, 'zookeeper', 30_000) };
}

export interface ZooKeeperMemberSpec {
  /** The member's `myid`. */
  readonly id: number;
  readonly clientPort: number;
  readonly quorumPort: number;
  readonly electionPort: number;
  /** As the member sees it (a host path, or a path in its container). */
  readonly dataDir: string;
}

/**
 * The members of a new ensemble of `size` (1 = standalone) on free loopback ports, data dirs
 * from `dataDir`, and `config`: one member's zoo.cfg, the same for a process and a container.
 */
export async function planEnsemble(
  size: number,
  dataDir: (id: number) => string,
): Promise<{ specs: ZooKeeperMemberSpec[]; config: (spec: ZooKeeperMemberSpec) => string }> {
  const specs: ZooKeeperMemberSpec[] = [];
  for (let id = 1; id <= size; id++) {
    specs.push({
      id,
      clientPort: await proc.freePort(),
      quorumPort: await proc.freePort(),
      electionPort: await proc.freePort(),
      dataDir: dataDir(id),
    });
  }
  const ensemble =
    size > 1
      ? specs.map((spec) => `server.${spec.id}=127.0.0.1:${spec.quorumPort}:${spec.electionPort}`)
      : [];
  // tickTime=200 keeps session timeouts short (the server allows 2–20 ticks: 0.4–4 s).
  const config = (spec: ZooKeeperMemberSpec) =>
    [
      'tickTime=200',
      `initLimit=${size > 1 ? 20 : 10}`,
      `syncLimit=${size > 1 ? 10 : 5}`,
      `dataDir=${spec.dataDir}`,
      `clientPort=${spec.clientPort}`,
      'clientPortAddress=127.0.0.1',
      'admin.enableServer=false',
      '4lw.commands.whitelist=ruok,srvr',
      ...ensemble,
      '',
    ].join('\n');
  return { specs, config };
}

/**
 * Whether the member on `clientPort` serves: `ruok` says imok as soon as the process listens,
 * before it serves; `srvr` names a mode only once it does (standalone, or leader/follower of a
 * quorum).
 */
export async function zookeeperServes(clientPort: number, size: number): Promise<boolean> {
  if ((await fourLetterWord('127.0.0.1', clientPort, 'ruok')) !== 'imok') return false;
  const mode = await zookeeperMode(clientPort);
  return size === 1 ? mode === 'standalone' : mode === 'leader' || mode === 'follower';
}

/** The member that `spec` planned, served by `managed` (a process or a container). */
export function zookeeperMember<P extends proc.ManagedProcess>(
  spec: ZooKeeperMemberSpec,
  managed: P,
): ZooKeeperMember & { process: P } {
  return {
    id: spec.id,
    clientPort: spec.clientPort,
    connectString: `127.0.0.1:${spec.clientPort}`,
    dataDir: spec.dataDir,
    process: managed,
  };
}

async function startMembers(size: number): Promise<ZooKeeperService> {
  const external = externalConnect();
  if (external) return service(external, [], true);
  const root = proc.tempDir('zookeeper');
  const { specs, config } = await planEnsemble(size, (id) => join(root, `zk${id}`));
  const members = await proc.allStarted(
    specs.map(async (spec): Promise<ZooKeeperMember> => {
      mkdirSync(spec.dataDir, { recursive: true });
      if (size > 1) writeFileSync(join(spec.dataDir, 'myid'), `${spec.id}\n`);
      const configFile = join(spec.dataDir, 'zoo.cfg');
      writeFileSync(configFile, config(spec));
      const managed = await proc.startProcess({
        name: `zookeeper ${spec.id}`,
        command: 'java',
        args: [
          '-Xmx256m',
          '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
          '-cp',
          CLASSPATH,
          MAIN,
          configFile,
        ],
        cwd: spec.dataDir,
        readyTimeoutMs: 60_000,
        ready: () => zookeeperServes(spec.clientPort, size),
      });
      return zookeeperMember(spec, managed);
    }),
    (member) => member.process.kill(),
  );
  return service(members.map((member) => member.connectString).join(','), members, false);
}

/**
 * One standalone ZooKeeper (tickTime=200) on a free loopback port in a temp dir, or the user's
 * from `DLM_TEST_ZK_CONNECT`. Resolves once it answers `ruok` with `imok` and serves
 * (`srvr` says `Mode: standalone`).
 */
export function startZooKeeper(): Promise<ZooKeeperService> {
  return startMembers(1);
}

/**
 * An ensemble of `size` members (3 by default), resolved once every member is leader or
 * follower. `member.process.start()` after a kill waits for that member to join a quorum:
 * when a majority was killed, start them again together (`Promise.all`).
 */
export function startZooKeeperEnsemble(size = 3): Promise<ZooKeeperService> {
  return startMembers(size);
}

// For the container provider (zookeeper-container.ts), which builds the same service over
// containers.
export { service as zookeeperService };
