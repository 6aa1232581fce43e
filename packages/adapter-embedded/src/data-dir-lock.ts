import { readFileSync } from 'node:fs';
import { open, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DlmError } from '@dlm/core';

/**
 * Keeps two backends from appending to one journal. A `LOCK` file holds the owning pid; one
 * left behind by a process that died (kill -9) is taken over, since no live process holds it.
 */

const openInThisProcess = new Set<string>();

/**
 * How long a claim waits for the holder to go, checking every `HOLDER_POLL_MS`: a server killed
 * with kill -9 lingers until it has exited and been reaped, and a restart right after it (what
 * a supervisor or a user does) would otherwise be refused now and then.
 */
const HOLDER_GONE_WITHIN_MS = 2_000;
const HOLDER_POLL_MS = 50;

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  return !isZombie(pid);
}

/** A process that has exited but is not reaped yet (Linux: state Z in /proc): it holds nothing. */
function isZombie(pid: number): boolean {
  try {
    // "pid (comm) S …": the state follows the last ')', as comm may hold spaces and parentheses.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z';
  } catch {
    return false;
  }
}

/** Whether `pid` still runs after waiting up to `HOLDER_GONE_WITHIN_MS` for it to go. */
async function stillAlive(pid: number): Promise<boolean> {
  for (let waited = 0; isAlive(pid); waited += HOLDER_POLL_MS) {
    if (waited >= HOLDER_GONE_WITHIN_MS) return true;
    await sleep(HOLDER_POLL_MS);
  }
  return false;
}

/** Claims `dir`; the returned function gives it back. */
export async function lockDataDir(dir: string): Promise<() => Promise<void>> {
  const path = join(dir, 'LOCK');
  if (openInThisProcess.has(path)) {
    throw new DlmError('UNAVAILABLE', `data dir ${dir} is already open in this process`);
  }
  // Claimed before the first await, so two concurrent opens in this process cannot both pass.
  openInThisProcess.add(path);
  try {
    await claim(dir, path);
  } catch (error) {
    openInThisProcess.delete(path);
    throw error;
  }
  return async () => {
    openInThisProcess.delete(path);
    await rm(path, { force: true });
  };
}

async function claim(dir: string, path: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      const handle = await open(path, 'wx');
      await handle.writeFile(`${process.pid}\n`);
      await handle.close();
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) {
        throw new DlmError(
          'UNAVAILABLE',
          `cannot lock data dir ${dir}: ${(error as Error).message}`,
          {
            cause: error,
          },
        );
      }
    }
    const pid = Number.parseInt(await readFile(path, 'utf8').catch(() => ''), 10);
    // Our own pid in a stale file means a previous life of this process id (a restarted
    // container), since this process has not opened the dir.
    if (Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid && (await stillAlive(pid))) {
      throw new DlmError('UNAVAILABLE', `data dir ${dir} is in use by process ${pid}`);
    }
    await rm(path, { force: true });
  }
}
