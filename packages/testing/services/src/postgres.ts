import { spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import * as proc from './process.js';

/**
 * PostgreSQL for tests: a fresh cluster (`initdb`) in a throwaway directory, served by
 * `postgres` on a free loopback port, as a `ManagedProcess` (kill -9, pause, start again with its
 * data). Debian's `postgresql` package puts the binaries in `/usr/lib/postgresql/<version>/bin`,
 * off PATH; they are looked up there first. PostgreSQL refuses to run as root, so under root the
 * cluster belongs to the `postgres` user (or `nobody`) and both programs run as that user.
 * `DLM_TEST_POSTGRES_URL` (`postgres://user:pass@host:port/db`) points the tests at the user's own
 * PostgreSQL instead; then no process is started and kill/pause/resume/start throw.
 */

export interface PostgresService extends proc.ManagedProcess {
  /** `postgres://postgres@127.0.0.1:PORT/postgres` (trust authentication on loopback). */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly database: string;
  /** The cluster's data directory; empty for an external PostgreSQL. */
  readonly dir: string;
  /** True when this is the user's PostgreSQL from `DLM_TEST_POSTGRES_URL` (not ours to kill). */
  readonly external: boolean;
}

const ENV = 'DLM_TEST_POSTGRES_URL';

function externalUrl(): URL | undefined {
  const value = process.env[ENV]?.trim();
  return value ? new URL(value) : undefined;
}

/** The directory holding `initdb` and `postgres`: the newest Debian version, else PATH. */
export function postgresBinDir(): string | null {
  const root = '/usr/lib/postgresql';
  if (existsSync(root)) {
    const versions = readdirSync(root)
      .filter((version) => existsSync(join(root, version, 'bin', 'postgres')))
      .sort((a, b) => Number(b) - Number(a));
    const newest = versions[0];
    if (newest !== undefined && existsSync(join(root, newest, 'bin', 'initdb'))) {
      return join(root, newest, 'bin');
    }
  }
  const initdb = proc.findBinary('initdb');
  const postgres = proc.findBinary('postgres');
  if (!initdb || !postgres) return null;
  const dir = initdb.slice(0, initdb.lastIndexOf('/'));
  return existsSync(join(dir, 'postgres')) ? dir : null;
}

/**
 * Whether PostgreSQL tests can run: `DLM_TEST_POSTGRES_URL` is set or `initdb` and `postgres`
 * are installed. With CI=true a missing PostgreSQL throws instead of skipping.
 */
export function postgresAvailable(): boolean {
  return proc.serviceAvailable(
    'PostgreSQL (initdb, postgres)',
    externalUrl() !== undefined || postgresBinDir() !== null,
  );
}

/** Whether the server can be killed, paused and restarted (false against the user's own). */
export function postgresManaged(): boolean {
  return externalUrl() === undefined;
}

/**
 * Opens a session the way a client does (startup message, trust authentication) and reports
 * whether the server got as far as ReadyForQuery. "The database system is starting up" and
 * refused connections are false.
 */
export function pingPostgres(
  host: string,
  port: number,
  user = 'postgres',
  database = 'postgres',
  timeoutMs = 1_000,
): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    let received = Buffer.alloc(0);
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.on('connect', () => {
      const body = Buffer.from(`user\0${user}\0database\0${database}\0\0`, 'utf8');
      const header = Buffer.alloc(8);
      header.writeInt32BE(8 + body.length, 0);
      header.writeInt32BE(196_608, 4); // protocol 3.0
      socket.write(Buffer.concat([header, body]));
    });
    socket.on('data', (chunk) => {
      received = Buffer.concat([received, chunk]);
      // Messages: a type byte, then an int32 length that counts itself.
      while (received.length >= 5) {
        const type = String.fromCharCode(received[0] ?? 0);
        const length = received.readInt32BE(1);
        if (received.length < 1 + length) return;
        if (type === 'E') return done(false);
        if (type === 'R' && received.readInt32BE(5) !== 0) return done(false); // wants a password
        if (type === 'Z') {
          socket.write(Buffer.from([0x58, 0, 0, 0, 4])); // Terminate
          return done(true);
        }
        received = received.subarray(1 + length);
      }
    });
    socket.on('error', () => done(false));
    socket.on('close', () => done(false));
  });
}

/** The processes whose parent is `pid` (PostgreSQL's backends, one per connection). */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(entry)) continue;
    try {
      // `pid (comm) state ppid …`: comm may hold spaces, so read after its closing parenthesis.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) children.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return children;
}

function signal(pids: number[], name: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, name);
    } catch {}
  }
}

function externalService(url: URL): PostgresService {
  return {
    ...proc.externalProcess(`postgres(${ENV})`, 'PostgreSQL', ENV),
    external: true,
    url: url.href,
    host: url.hostname || '127.0.0.1',
    port: Number(url.port || 5432),
    user: decodeURIComponent(url.username) || 'postgres',
    database: url.pathname.replace(/^\//, '') || 'postgres',
    dir: '',
  };
}

/**
 * Under root, the command prefix that runs a program as an unprivileged user. `setpriv` execs
 * the program itself (unlike `runuser`, which stays around as its parent), so the managed
 * process is `postgres` and a kill -9 reaches it.
 */
function unprivileged(): { prefix: string[]; uid: number; gid: number } | null {
  if (userInfo().uid !== 0) return null;
  for (const user of ['postgres', 'nobody']) {
    const ids = spawnSync('id', ['-u', user], { encoding: 'utf8' });
    const gids = spawnSync('id', ['-g', user], { encoding: 'utf8' });
    if (ids.status === 0 && gids.status === 0) {
      const uid = Number(ids.stdout.trim());
      const gid = Number(gids.stdout.trim());
      const setpriv = proc.findBinary('setpriv');
      if (!setpriv)
        throw new Error('running as root needs setpriv (util-linux) to drop privileges');
      return {
        prefix: [setpriv, `--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', '--'],
        uid,
        gid,
      };
    }
  }
  throw new Error('running as root, and neither a postgres nor a nobody user exists');
}

/**
 * Starts PostgreSQL in a new cluster: `initdb` (trust authentication, UTF-8, C locale) in a
 * temporary directory, then `postgres` listening on 127.0.0.1 on a free port, its Unix socket in
 * that directory. Ready when a session can be opened. `fsync` is off: a commit still writes its
 * WAL before it returns (`synchronous_commit` stays on), so the data survives a kill -9 of the
 * server (it is in the OS's page cache), just not a crash of the machine, which is all tests
 * need, and it keeps them fast.
 *
 * @example
 * const pg = await startPostgres();
 * afterAll(() => pg.stop());
 * const client = new pg.Client({ connectionString: pg.url });
 */
export async function startPostgres(): Promise<PostgresService> {
  const external = externalUrl();
  if (external) return externalService(external);

  const binDir = postgresBinDir();
  if (!binDir) {
    throw new Error('PostgreSQL is not installed (apt-get install postgresql): no initdb/postgres');
  }
  const drop = unprivileged();
  const base = proc.tempDir('postgres');
  const dataDir = join(base, 'data');
  mkdirSync(dataDir, { mode: 0o700 });
  if (drop) {
    chownSync(base, drop.uid, drop.gid);
    chownSync(dataDir, drop.uid, drop.gid);
  }
  const user = 'postgres';
  const run = (binary: string, args: string[]) =>
    drop
      ? {
          command: drop.prefix[0] as string,
          args: [...drop.prefix.slice(1), join(binDir, binary), ...args],
        }
      : { command: join(binDir, binary), args };

  const init = run('initdb', [
    '-D',
    dataDir,
    '-U',
    user,
    '--auth=trust',
    '--encoding=UTF8',
    '--locale=C',
    '--no-sync',
  ]);
  const initResult = spawnSync(init.command, init.args, { cwd: base, encoding: 'utf8' });
  if (initResult.status !== 0) {
    throw new Error(`initdb failed:\n${initResult.stdout}${initResult.stderr}`);
  }

  const host = '127.0.0.1';
  const port = await proc.freePort();
  const serve = run('postgres', [
    '-D',
    dataDir,
    '-p',
    String(port),
    '-k',
    base,
    '-c',
    `listen_addresses=${host}`,
    '-c',
    'fsync=off',
    '-c',
    'full_page_writes=off',
  ]);
  const managed = await proc.startProcess({
    name: `postgres:${port}`,
    command: serve.command,
    args: serve.args,
    cwd: base,
    ready: () => pingPostgres(host, port, user),
  });
  let paused: number[] = [];
  return proc.forwardProcess(managed, {
    kill: () => {
      signal(paused, 'SIGCONT');
      paused = [];
      return managed.kill();
    },
    async stop(graceMs?: number) {
      signal(paused, 'SIGCONT');
      paused = [];
      // SIGTERM alone is a "smart" shutdown that waits for every client to disconnect; SIGINT
      // is the fast one (open sessions are ended).
      const pid = managed.pid;
      if (managed.running && pid !== undefined) {
        try {
          process.kill(pid, 'SIGINT');
        } catch {}
      }
      await managed.stop(graceMs);
    },
    // PostgreSQL serves each connection from its own child process: pausing the postmaster
    // alone would stop new connections only. The postmaster first (so it forks no more), then
    // every child; resumed the other way round.
    pause: () => {
      managed.pause();
      const pid = managed.pid;
      paused = pid === undefined ? [] : childrenOf(pid);
      signal(paused, 'SIGSTOP');
    },
    resume: () => {
      signal(paused, 'SIGCONT');
      paused = [];
      managed.resume();
    },
    url: `postgres://${user}@${host}:${port}/postgres`,
    host,
    port,
    user,
    database: 'postgres',
    dir: dataDir,
    external: false,
  });
}
