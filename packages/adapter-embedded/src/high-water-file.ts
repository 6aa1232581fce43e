import { open, readFile, rename } from 'node:fs/promises';
import { crc32 } from 'node:zlib';
import { syncDir } from './sync-dir.js';

/**
 * The fencing high-water mark in a small file of its own, replaced atomically
 * (write temp, fsync, rename, fsync the directory). The journal records it too, but a corrupt
 * journal loses its tail: this copy is what keeps tokens from going backwards then.
 */

const PREFIX = 'DLMHW1';

function format(token: bigint): string {
  const digits = token.toString();
  return `${PREFIX} ${digits} ${crc32(digits).toString(16)}\n`;
}

/** The mark in `path`, 0n when the file is missing, or a reason why it cannot be read. */
export async function readHighWater(
  path: string,
): Promise<{ token: bigint } | { problem: string }> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { token: 0n };
    return { problem: `cannot read it: ${(error as Error).message}` };
  }
  const match = /^DLMHW1 ([0-9]{1,19}) ([0-9a-f]{1,8})\n$/.exec(text);
  if (match === null || crc32(match[1]!).toString(16) !== match[2]) {
    return { problem: 'its content is not a valid high-water record' };
  }
  return { token: BigInt(match[1]!) };
}

export async function writeHighWater(path: string, token: bigint): Promise<void> {
  const temp = `${path}.tmp`;
  const handle = await open(temp, 'w');
  try {
    await handle.writeFile(format(token), 'utf8');
    await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(temp, path);
  await syncDir(path);
}
