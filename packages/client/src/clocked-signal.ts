const abortedOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'aborted')!.get!;
const reasonOf = Object.getOwnPropertyDescriptor(AbortSignal.prototype, 'reason')!.get!;

/**
 * `signal`, made to ask `check` before it answers: `aborted`, `reason` and `throwIfAborted()`
 * first run `check` (which aborts the signal when its lease's deadline has passed), so a signal
 * taken before an event-loop stall reads aborted after it even when no timer has run yet. The
 * signal's listeners are told as ever: when `check` or a timer aborts it.
 */
export function clockedSignal(signal: AbortSignal, check: () => void): AbortSignal {
  Object.defineProperties(signal, {
    aborted: {
      configurable: true,
      get: () => {
        check();
        return abortedOf.call(signal) as boolean;
      },
    },
    reason: {
      configurable: true,
      get: () => {
        check();
        return reasonOf.call(signal) as unknown;
      },
    },
    throwIfAborted: {
      configurable: true,
      value: () => {
        check();
        AbortSignal.prototype.throwIfAborted.call(signal);
      },
    },
  });
  return signal;
}

/** A check that asks each of `signals` (clocked ones run their own checks). */
export function askingEach(signals: readonly AbortSignal[]): () => void {
  return () => {
    for (const signal of signals) if (signal.aborted) return;
  };
}
