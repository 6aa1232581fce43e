import { open, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { DlmError } from '@dlm/core';

/**
 * Keeps two backends from appending to one journal. A `LOCK` file holds the owning pid; one
 * left behind by a process that died (kill -9) is taken over, since no live process holds it.
 */

const openInThisProcess = new Set<string>();

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
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
    if (Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid && isAlive(pid)) {
      throw new DlmError('UNAVAILABLE', `data dir ${dir} is in use by process ${pid}`);
    }
    await rm(path, { force: true });
  }
}
