import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { constants, hostname } from 'node:os';
import { createClient, isDlmError, type Lease, type LeaseGroup } from '@dlm/client';
import {
  flagsOf,
  formatBound,
  formatDuration,
  HELP_FLAG,
  parseDuration,
  parseFlags,
  UsageError,
} from '@dlm/flags';
import type { Command } from '../command.js';
import {
  CONNECTION_FLAGS,
  CONNECTION_USAGE,
  clientOptions,
  connectionOptions,
} from '../connection-options.js';
import { EXIT } from '../exit-codes.js';
import { printError } from '../output.js';
import { noticeWaiting } from '../waiting-notice.js';

const USAGE = `Usage: dlm lock NAME [NAME...] [options] -- CMD [ARGS...]

Runs CMD while holding lock NAME: waits for the lock, runs CMD, renews the lease in the
background while CMD runs, and releases it when CMD exits. If the lock is lost while CMD runs
(it expired because it could not be renewed, or an operator revoked it), CMD gets SIGTERM,
then SIGKILL after the grace period. With several NAMEs (the -- is then needed) it takes them
all or none (in one order, so concurrent dlm locks over overlapping names cannot deadlock),
and stops CMD when any of them is lost.

Options:
  --ttl DURATION     lease length; renewed at a third of it (default 30s)
  --wait DURATION    how long to wait while another owner holds the lock (default 10s;
                     0 = give up at once; at most the server's limit, 5m by default)
  --grace DURATION   after losing the lock: time between SIGTERM and SIGKILL (default 10s)
  --owner ID         the owner to hold it as (default HOSTNAME:PID:RANDOM)
  --shared           hold it shared: any number of shared holders at once, never beside an
                     exclusive one (a read lock; the default is exclusive)
  --limit N          with --shared (implied): at most N shared holders at once (a semaphore
                     of N permits, as consul lock -n N); every holder must use the same N
  --on-release-request SIGNAL
                     when someone asks the holder to let go (lock.requestRelease, or a
                     waiting dlm lock --request-release), send CMD this signal (default TERM;
                     none: ignore requests). The lock is released when CMD exits, as always
  --request-release  if the lock is held and this has to wait, ask the holders to let go
  --lock-delay DURATION  one exclusive NAME: if the lease ends uncleanly (it expired: dlm
                     was paused or cut off; or an operator revoked it), nobody gets the lock
                     until DURATION after that end, so a CMD that has not been stopped yet
                     is done before the next holder starts (default 0; at most the server's
                     limit, 1m by default; a clean release has no delay)
  --max-hold DURATION  one exclusive NAME: hold the lock at most this long (at least --ttl;
                     at most the server's limit, 168h by default): renewals stop at the cap,
                     the lock is then lost and CMD stopped (exit 123), however long CMD runs
${CONNECTION_USAGE}
  -v, --verbose      say on stderr when the lock is acquired and released
  -h, --help         print this help
Durations: 500ms, 30s, 5m, 1h, 1m30s; 0 alone is zero, any other number needs its unit.

CMD's environment gets DLM_LOCK_NAME, DLM_FENCING_TOKEN (decimal) and DLM_LOCK_OWNER: pass
the fencing token to whatever CMD writes to, so a stale holder's writes can be refused. With
several NAMEs it gets DLM_FENCING_TOKENS instead of DLM_LOCK_NAME and DLM_FENCING_TOKEN:
NAME=TOKEN pairs, comma separated, in the order given (such NAMEs may not contain "," or "=").
CMD never gets the lease key (the secret that lets dlm release or extend the lease): only dlm
itself can end or renew the lock.
SIGTERM and SIGHUP sent to dlm are passed on to CMD; so is SIGINT unless dlm runs in a
terminal (where Ctrl-C reaches CMD directly).

Exit status:
  CMD's own status (128+N if CMD was killed by signal N)
  123  the lock was lost while CMD ran; CMD was stopped
  124  --wait ran out while another owner held a lock; CMD did not run
  125  dlm failed (server unreachable, refused the request); CMD did not run
  126  CMD could not be executed       127  CMD was not found
  2    usage error
`;

/** The client's time-out of one request (waiting for a connection included). */
const REQUEST_TIMEOUT_MS = 10_000;

const LOCK_OPTIONS = {
  ...CONNECTION_FLAGS,
  ...flagsOf(
    'string',
    'ttl',
    'wait',
    'limit',
    'lock-delay',
    'max-hold',
    'grace',
    'owner',
    'on-release-request',
  ),
  ...flagsOf('boolean', 'shared', 'request-release'),
  verbose: { type: 'boolean', short: 'v' },
  ...HELP_FLAG,
} as const;

const VALUE_FLAGS = new Set([
  '--server',
  '--token-file',
  '--ca',
  '--ttl',
  '--wait',
  '--grace',
  '--owner',
  '--limit',
  '--on-release-request',
  '--lock-delay',
  '--max-hold',
]);

/**
 * Splits dlm's own arguments from CMD's: at the first `--`, or else at the first argument
 * after NAME that is not a flag (so `dlm lock NAME make -j4` works too).
 */
function splitCommand(argv: string[]): { own: string[]; command: string[] } {
  const separator = argv.indexOf('--');
  if (separator >= 0) return { own: argv.slice(0, separator), command: argv.slice(separator + 1) };
  let seenName = false;
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]!;
    if (arg.startsWith('-') && arg !== '-') {
      if (VALUE_FLAGS.has(arg)) i += 1;
      continue;
    }
    if (seenName) return { own: argv.slice(0, i), command: argv.slice(i) };
    seenName = true;
  }
  return { own: argv, command: [] };
}

function signalStatus(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 0);
}

export const lockCommand: Command = {
  name: 'lock',
  usage: USAGE,
  async run(argv) {
    const { own, command } = splitCommand(argv);
    const { values, positionals } = parseFlags(own, LOCK_OPTIONS, { allowPositionals: true });
    if (values.help) {
      process.stdout.write(USAGE);
      return EXIT.OK;
    }
    if (positionals.length === 0) throw new UsageError('a lock NAME is missing');
    if (command.length === 0 || command[0] === '') {
      throw new UsageError('nothing to run: dlm lock NAME [NAME...] -- CMD [ARGS...]');
    }
    const names = checkNames(positionals);
    const ttlMs = parseDuration(values.ttl ?? '30s', '--ttl');
    const waitMs = parseDuration(values.wait ?? '10s', '--wait');
    const graceMs = parseDuration(values.grace ?? '10s', '--grace');
    if (ttlMs <= 0) throw new UsageError('--ttl must be more than 0');
    const owner = values.owner ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    const mode = modeOf(values.shared === true, values.limit);
    const onRequest = requestSignalOf(values['on-release-request']);
    const requestRelease = values['request-release'] === true;
    const lockDelay = lockDelayOf(values['lock-delay'], names);
    const maxHold = maxHoldOf(values['max-hold'], names);
    const verbose = values.verbose === true;

    const connection = connectionOptions(values);
    const client = createClient({
      ...clientOptions(connection),
      name: 'dlm-cli',
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
    });
    const stopNotice = noticeWaiting(client, connection.url);
    const held = await acquire(client, names, {
      ttlMs,
      waitMs,
      owner,
      ...mode,
      ...lockDelay,
      ...maxHold,
      ...(requestRelease ? { requestRelease } : {}),
    });
    stopNotice();
    if (typeof held === 'number') return held;
    const label = names.join(', ');
    if (verbose) {
      for (const lease of held.leases) {
        process.stderr.write(
          `dlm: acquired ${lease.name} (token ${lease.token}, ttl ${formatDuration(lease.ttlMs)}${lease.mode === 'shared' ? `, shared, limit ${lease.limit}` : ''})\n`,
        );
      }
    }
    if (held.signal.aborted) {
      const lost = lostLease(held);
      process.stderr.write(
        `dlm: lost lock ${lost?.name ?? label} (${lost?.lost}) before the command started\n`,
      );
      await client.close();
      return EXIT.LOCK_LOST;
    }

    const status = await runUnderLease(command, held, graceMs, onRequest);
    if (status.lost) {
      await client.close();
      return EXIT.LOCK_LOST;
    }
    try {
      const released = await held.release();
      if (verbose && released) process.stderr.write(`dlm: released ${label}\n`);
    } catch (error) {
      process.stderr.write(`dlm: could not release ${label}; it will expire by itself\n`);
      printError(error);
    }
    await client.close();
    return status.code;
  },
};

/**
 * The NAMEs, once each. Several go to CMD as NAME=TOKEN pairs separated by commas, so there a
 * name with "," or "=" is refused rather than handed over in a form CMD cannot split.
 */
function checkNames(names: string[]): string[] {
  const seen = new Set<string>();
  for (const name of names) {
    if (seen.has(name)) throw new UsageError(`lock NAME ${JSON.stringify(name)} is given twice`);
    seen.add(name);
    if (names.length > 1 && /[,=]/.test(name)) {
      throw new UsageError(
        `with several lock NAMEs, a NAME may not contain "," or "=" (DLM_FENCING_TOKENS is NAME=TOKEN,NAME=TOKEN): ${JSON.stringify(name)}`,
      );
    }
  }
  return names;
}

/** What CMD runs under: one lease, or the group of several. */
type Held = Pick<LeaseGroup, 'leases' | 'signal' | 'releaseRequested' | 'release'>;

function asHeld(lease: Lease): Held {
  return {
    leases: [lease],
    // Read through the lease every time: it asks the clock.
    get signal() {
      return lease.signal;
    },
    get releaseRequested() {
      return lease.releaseRequested;
    },
    release: () => lease.release(),
  };
}

/** The first lease of `held` that was lost, if one was (its reason in `lost`). */
function lostLease(held: Held): Lease | undefined {
  return held.leases.find((lease) => lease.lost !== undefined);
}

/** CMD's view of the locks: the name and token of one, or the NAME=TOKEN pairs of several. */
function lockEnvironment(held: Held): NodeJS.ProcessEnv {
  const [first] = held.leases;
  const owner = { DLM_LOCK_OWNER: first!.owner };
  if (held.leases.length === 1) {
    return { ...owner, DLM_LOCK_NAME: first!.name, DLM_FENCING_TOKEN: first!.token.toString() };
  }
  const pairs = held.leases.map((lease) => `${lease.name}=${lease.token}`);
  return { ...owner, DLM_FENCING_TOKENS: pairs.join(',') };
}

/** `--shared` and `--limit N` (which implies `--shared`) as acquire options. */
function modeOf(shared: boolean, limit: string | undefined): { mode?: 'shared'; limit?: number } {
  if (limit === undefined) return shared ? { mode: 'shared' } : {};
  if (!/^[1-9][0-9]{0,8}$/.test(limit)) {
    throw new UsageError(`--limit must be a whole number of holders of 1 or more, got ${limit}`);
  }
  return { mode: 'shared', limit: Number(limit) };
}

/**
 * `--on-release-request SIGNAL`: the signal CMD gets when the holder is asked to let go
 * (TERM by default; `none`: nothing). A name with or without `SIG`, any case.
 */
function requestSignalOf(value: string | undefined): NodeJS.Signals | undefined {
  if (value === undefined) return 'SIGTERM';
  if (value.toLowerCase() === 'none') return undefined;
  const signal = `SIG${value.toUpperCase().replace(/^SIG/, '')}`;
  if (!(signal in constants.signals)) {
    throw new UsageError(
      `--on-release-request must be a signal name (TERM, INT, HUP, USR1, ...) or none, got ${value}`,
    );
  }
  return signal as NodeJS.Signals;
}

/** `--lock-delay DURATION` as an acquire option: one NAME only (a set has no lock-delay). */
function lockDelayOf(flag: string | undefined, names: string[]): { lockDelayMs?: number } {
  if (flag === undefined) return {};
  const lockDelayMs = parseDuration(flag, '--lock-delay');
  if (lockDelayMs > 0 && names.length > 1) {
    throw new UsageError('--lock-delay takes one NAME (a set of locks has no lock-delay)');
  }
  return lockDelayMs > 0 ? { lockDelayMs } : {};
}

/** `--max-hold DURATION` as an acquire option: one NAME only (a set has no cap on holding). */
function maxHoldOf(flag: string | undefined, names: string[]): { maxHoldMs?: number } {
  if (flag === undefined) return {};
  const maxHoldMs = parseDuration(flag, '--max-hold');
  if (names.length > 1) {
    throw new UsageError('--max-hold takes one NAME (a set of locks has no cap on holding)');
  }
  return { maxHoldMs };
}

interface LockOptions {
  ttlMs: number;
  waitMs: number;
  owner: string;
  mode?: 'shared';
  limit?: number;
  requestRelease?: boolean;
  lockDelayMs?: number;
  maxHoldMs?: number;
}

/** Acquires, or says why not and resolves with the exit code. SIGINT/SIGTERM end the wait. */
async function acquire(
  client: ReturnType<typeof createClient>,
  names: string[],
  options: LockOptions,
): Promise<Held | number> {
  const interrupt = new AbortController();
  let interruptedBy: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    interruptedBy = signal;
    interrupt.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const acquireOptions = {
    ...options,
    autoExtend: true,
    signal: interrupt.signal,
    // Retries (a dropped connection, LIMIT_EXCEEDED) within one request time-out plus the
    // wait: an unreachable server ends the command after about 10 s plus --wait, not after
    // three full tries of it.
    retry: { deadlineMs: REQUEST_TIMEOUT_MS + options.waitMs },
  };
  try {
    if (names.length === 1) return asHeld(await client.acquire(names[0]!, acquireOptions));
    const { mode, limit, ...setOptions } = acquireOptions;
    const specs = names.map((name) => ({
      name,
      ...(mode ? { mode } : {}),
      ...(limit === undefined ? {} : { limit }),
    }));
    return await client.acquireAll(specs, setOptions);
  } catch (error) {
    await client.close();
    if (interruptedBy) return signalStatus(interruptedBy);
    if (isDlmError(error, 'LOCK_HELD')) {
      const left = error.details.ttlRemainingMs;
      const name = error.details.name ?? names[0]!;
      const delayed = error.details.lockDelayRemainingMs;
      if (delayed !== undefined) {
        process.stderr.write(
          `dlm: lock ${name} is in its lock-delay (its last lease ended uncleanly); free in ${formatDuration(delayed)}\n`,
        );
        return EXIT.WAIT_TIMEOUT;
      }
      const by = options.mode
        ? `has no room for another shared holder${options.limit === undefined ? '' : ` (limit ${options.limit})`}`
        : 'is held by another owner';
      process.stderr.write(
        `dlm: lock ${name} ${by}${options.waitMs ? ` (waited ${formatDuration(options.waitMs)})` : ''}${left === undefined ? '' : `; its lease has ${formatDuration(left)} left`}\n`,
      );
      return EXIT.WAIT_TIMEOUT;
    }
    if (isDlmError(error, 'INVALID_PARAMS')) {
      process.stderr.write(`dlm lock: ${inUserTerms(error, options)}\n`);
      return EXIT.USAGE;
    }
    printError(error);
    return EXIT.DLM_ERROR;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** The flag each checked request field comes from. */
const FLAG_OF_FIELD: Record<string, { flag: string; key: 'ttlMs' | 'waitMs' | 'lockDelayMs' }> = {
  ttlMs: { flag: '--ttl', key: 'ttlMs' },
  waitMs: { flag: '--wait', key: 'waitMs' },
  lockDelayMs: { flag: '--lock-delay', key: 'lockDelayMs' },
};

/**
 * A validation error in the terms the user typed: `--ttl must be between 100ms and 24h, got
 * 50ms`, not the wire's `ttlMs must be in [100, 86400000]`.
 */
function inUserTerms(error: Error & { details: { field?: string } }, options: LockOptions): string {
  const field = error.details.field;
  const theirs = (error.details as { limit?: unknown }).limit;
  if (field === 'limit' && typeof theirs === 'number') {
    const asked =
      options.limit === undefined ? 'no --limit (a read lock)' : `--limit ${options.limit}`;
    return `${asked}, but the lock's current shared holders use --limit ${theirs}: every holder must use the same limit`;
  }
  if (field === 'limit') return error.message.replace(/^limit/, '--limit');
  if (field === 'mode') return error.message;
  const known = field === undefined ? undefined : FLAG_OF_FIELD[field];
  const range = /must be in \[(\d+), (\d+)\]/.exec(error.message);
  if (known && range) {
    return `${known.flag} must be between ${formatBound(Number(range[1]))} and ${formatBound(Number(range[2]))}, got ${formatBound(options[known.key] ?? 0)}`;
  }
  if (field === 'name') return error.message.replace(/^name/, 'the lock NAME');
  if (field === 'owner') return error.message.replace(/^owner/, '--owner');
  if (field === 'lockDelayMs') return error.message.replace(/^lockDelayMs/, '--lock-delay');
  if (field === 'maxHoldMs') return maxHoldInUserTerms(error.message, options);
  return error.message;
}

/** `maxHoldMs must be at most 604800000 ms, got …` as `--max-hold must be at most 7d, got …`. */
function maxHoldInUserTerms(message: string, options: LockOptions): string {
  const got = formatBound(options.maxHoldMs ?? 0);
  if (message.includes('at least')) {
    return `--max-hold must be at least --ttl (${formatBound(options.ttlMs)}), got ${got}`;
  }
  const most = /at most (\d+) ms/.exec(message);
  if (most) return `--max-hold must be at most ${formatBound(Number(most[1]))}, got ${got}`;
  return message.replace(/^maxHoldMs/, '--max-hold');
}

/**
 * Runs `command` with the lease in its environment until it exits. Losing the lease stops it:
 * SIGTERM, then SIGKILL after `graceMs`.
 */
function runUnderLease(
  command: string[],
  held: Held,
  graceMs: number,
  onRequest: NodeJS.Signals | undefined,
): Promise<{ code: number; lost: boolean }> {
  return new Promise((resolve) => {
    let child: ChildProcess;
    let done = false;
    let lost = false;
    let killTimer: NodeJS.Timeout | undefined;
    const forwarded: NodeJS.Signals[] = process.stdin.isTTY
      ? ['SIGTERM', 'SIGHUP']
      : ['SIGTERM', 'SIGHUP', 'SIGINT'];
    const forward = (signal: NodeJS.Signals) => child.kill(signal);
    // In a terminal, Ctrl-C reaches CMD directly (same process group); dlm must not die of it.
    const ignore = () => {};

    const finish = (code: number) => {
      if (done) return;
      done = true;
      clearTimeout(killTimer);
      held.signal.removeEventListener('abort', onLost);
      held.releaseRequested.removeEventListener('abort', onAsked);
      for (const signal of forwarded) process.off(signal, forward);
      process.off('SIGINT', ignore);
      resolve({ code, lost });
    };

    const onLost = () => {
      // The signal also aborts on our own release, which happens only after CMD exited.
      const lease = lostLease(held);
      if (done || lease === undefined) return;
      lost = true;
      process.stderr.write(
        `dlm: lost lock ${lease.name} (${lease.lost}); stopping the command (SIGTERM, SIGKILL in ${formatDuration(graceMs)})\n`,
      );
      child.kill('SIGTERM');
      killTimer = setTimeout(() => {
        process.stderr.write('dlm: the command did not stop in time: SIGKILL\n');
        child.kill('SIGKILL');
      }, graceMs);
    };

    // Asked to let go: CMD is told (once), and dlm releases when it exits, as always.
    const onAsked = () => {
      if (done || onRequest === undefined) return;
      const asked = held.leases.find((lease) => lease.releaseRequested.aborted) ?? held.leases[0]!;
      const why = asked.releaseRequestReason;
      process.stderr.write(
        `dlm: release of ${asked.name} requested${why === undefined ? '' : ` (${why})`}; sending ${onRequest} to the command\n`,
      );
      child.kill(onRequest);
    };

    child = spawn(command[0]!, command.slice(1), {
      stdio: 'inherit',
      env: { ...process.env, ...lockEnvironment(held) },
    });
    child.once('error', (error: NodeJS.ErrnoException) => {
      // Spawning failed: the command never ran.
      process.stderr.write(`dlm: cannot run ${command[0]}: ${error.message}\n`);
      finish(error.code === 'ENOENT' ? EXIT.NOT_FOUND : EXIT.NOT_EXECUTABLE);
    });
    child.once('exit', (code, signal) => {
      finish(code ?? (signal ? signalStatus(signal) : EXIT.DLM_ERROR));
    });
    held.signal.addEventListener('abort', onLost);
    held.releaseRequested.addEventListener('abort', onAsked, { once: true });
    for (const signal of forwarded) process.on(signal, forward);
    if (process.stdin.isTTY) process.on('SIGINT', ignore);
  });
}
