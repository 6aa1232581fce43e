import { createFenceGuard } from '@dlm/core';

/**
 * The fenced resource: a counter per key, read and written by lock holders. With `fencing`
 * on it is the resource-side half of fencing (core's `createFenceGuard`): every read and every
 * write presents the holder's token, and anything older than the newest token seen for the
 * key is refused. The read is fenced too: a new holder's read must shut out the old holder's
 * late write, or the old holder could still overwrite what the new one read.
 *
 * With `fencing` off (the negative control) every request is accepted, so a stale holder's
 * write can overwrite a newer one: the lost update the checker has to find.
 */
export interface FencedCounter {
  readonly fencing: boolean;
  read(key: string, token: bigint): { accepted: boolean; value: number };
  write(key: string, token: bigint, value: number): { accepted: boolean; previous: number };
  snapshot(): Record<string, { value: number; highest: string | null }>;
}

export function createFencedCounter(options: { fencing: boolean }): FencedCounter {
  const guard = createFenceGuard();
  const values = new Map<string, number>();
  const admit = (key: string, token: bigint) => !options.fencing || guard.accept(key, token);
  return {
    fencing: options.fencing,
    read(key, token) {
      const accepted = admit(key, token);
      return { accepted, value: values.get(key) ?? 0 };
    },
    write(key, token, value) {
      const previous = values.get(key) ?? 0;
      const accepted = admit(key, token);
      if (accepted) values.set(key, value);
      return { accepted, previous };
    },
    snapshot() {
      const keys = new Set([...values.keys()]);
      return Object.fromEntries(
        [...keys].sort().map((key) => {
          const highest = guard.highest(key);
          return [
            key,
            { value: values.get(key) ?? 0, highest: highest === undefined ? null : `${highest}` },
          ];
        }),
      );
    },
  };
}
