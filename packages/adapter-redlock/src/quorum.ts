import { type DlmError, toUnavailable } from '@dlm/core';

/** What one node said, or why it could not say. */
export type Outcome<T> = { ok: true; value: T } | { ok: false; error: DlmError };

export interface Gathered<T> {
  /** Resolves once `decided` holds (or every node has answered); pending nodes are undefined. */
  early: Promise<Array<Outcome<T> | undefined>>;
  /** Each node's own outcome, for follow-up work on stragglers. */
  each: Array<Promise<Outcome<T>>>;
}

/**
 * Runs `op` on every node in parallel and resolves as soon as the answers so far decide the
 * question, so that one stalled node does not hold every call up for its whole time-out.
 */
export function gather<N, T>(
  nodes: readonly N[],
  op: (node: N) => Promise<T>,
  decided: (outcomes: ReadonlyArray<Outcome<T> | undefined>) => boolean,
): Gathered<T> {
  const outcomes: Array<Outcome<T> | undefined> = nodes.map(() => undefined);
  let settled = 0;
  let resolveEarly: (value: Array<Outcome<T> | undefined>) => void = () => {};
  const early = new Promise<Array<Outcome<T> | undefined>>((resolve) => {
    resolveEarly = resolve;
  });
  const each = nodes.map((node, index) => {
    let started: Promise<T>;
    try {
      started = op(node);
    } catch (error) {
      started = Promise.reject(error);
    }
    return started
      .then(
        (value): Outcome<T> => ({ ok: true, value }),
        (error: unknown): Outcome<T> => ({ ok: false, error: toUnavailable(error, 'redis node') }),
      )
      .then((outcome) => {
        outcomes[index] = outcome;
        settled += 1;
        if (settled === nodes.length || decided(outcomes)) resolveEarly([...outcomes]);
        return outcome;
      });
  });
  if (nodes.length === 0) resolveEarly([]);
  return { early, each };
}

/** The values of the nodes that answered. */
export function answers<T>(outcomes: ReadonlyArray<Outcome<T> | undefined>): T[] {
  return outcomes.flatMap((outcome) => (outcome?.ok ? [outcome.value] : []));
}

/** The first failure among the outcomes, for the `cause` of an UNAVAILABLE. */
export function firstError<T>(
  outcomes: ReadonlyArray<Outcome<T> | undefined>,
): DlmError | undefined {
  for (const outcome of outcomes) if (outcome && !outcome.ok) return outcome.error;
  return undefined;
}

/** The `k`-th smallest (1-based) of `values`, or undefined when there are fewer. */
export function kthSmallest(values: readonly number[], k: number): number | undefined {
  if (k < 1 || k > values.length) return undefined;
  return [...values].sort((a, b) => a - b)[k - 1];
}

/** The largest token (Math.max does not take bigints). */
export function maxToken(tokens: readonly bigint[]): bigint {
  let max = 0n;
  for (const token of tokens) if (token > max) max = token;
  return max;
}
