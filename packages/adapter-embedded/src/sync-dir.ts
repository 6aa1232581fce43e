import { open } from 'node:fs/promises';
import { dirname } from 'node:path';

/** Fsyncs the directory holding `path`, so a rename or a new file in it survives a crash. */
export async function syncDir(path: string): Promise<void> {
  const handle = await open(dirname(path), 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
