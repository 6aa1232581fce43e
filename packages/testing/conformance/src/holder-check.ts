import type { LockMode, LockState } from '@dlm/core';

/**
 * The S7 checker: who holds one name, as its callers see it. A caller enters once its grant is
 * in hand and leaves before it sends the release, so each caller's interval lies inside its
 * lease's interval on the backend: an overlap seen here is an overlap there (no false alarms,
 * as long as no lease runs out while its caller still counts it: use leases far longer than
 * the holds).
 */
export interface HolderCheck {
  /** A caller holds the name from now on, in `mode` (with `limit`, when shared). */
  enter(mode: LockMode, limit?: number): void;
  /** A caller stops holding it (before its release is sent). */
  leave(mode: LockMode): void;
  /** A look at the backend's answer for the name (`get`): the same rules, on its holders. */
  observe(state: LockState | null): void;
  /** What broke S7, one line per violation (empty: nothing did). */
  readonly violations: readonly string[];
  /** The most shared holders seen at once by `enter`. */
  readonly maxShared: number;
  /** Grants counted by `enter`, per mode. */
  readonly grants: Readonly<Record<LockMode, number>>;
  /** Callers holding right now, per mode. */
  readonly holding: Readonly<Record<LockMode, number>>;
}

/** A checker for one name whose shared holders must agree on `limit`. */
export function holderCheck(limit: number): HolderCheck {
  const violations: string[] = [];
  const holding = { shared: 0, exclusive: 0 };
  const grants = { shared: 0, exclusive: 0 };
  let maxShared = 0;
  const violation = (what: string) => {
    // A broken backend may break S7 thousands of times in a run: the first few say enough.
    if (violations.length < 20) violations.push(what);
  };
  return {
    enter(mode, given) {
      grants[mode] += 1;
      if (mode === 'exclusive') {
        if (holding.exclusive + holding.shared > 0) {
          violation(
            `an exclusive grant beside ${holding.exclusive} exclusive and ${holding.shared} shared holders`,
          );
        }
        holding.exclusive += 1;
        return;
      }
      if (given !== limit) violation(`a shared grant with limit ${given}, not ${limit}`);
      if (holding.exclusive > 0) violation('a shared grant beside an exclusive holder');
      holding.shared += 1;
      if (holding.shared > limit)
        violation(`${holding.shared} shared holders at once (limit ${limit})`);
      maxShared = Math.max(maxShared, holding.shared);
    },
    leave(mode) {
      holding[mode] -= 1;
    },
    observe(state) {
      if (!state) return;
      const holders = state.holders?.length ?? 1;
      const mode = state.mode ?? 'exclusive';
      if (mode === 'exclusive' && holders > 1) violation(`get: ${holders} exclusive holders`);
      if (mode === 'shared' && holders > limit) {
        violation(`get: ${holders} shared holders (limit ${limit})`);
      }
      if (mode === 'shared' && state.limit !== limit) {
        violation(`get: shared holders with limit ${state.limit}, not ${limit}`);
      }
    },
    get violations() {
      return violations;
    },
    get maxShared() {
      return maxShared;
    },
    grants,
    holding,
  };
}
