/** A token bucket: `burst` tokens, refilled at `ratePerSecond`, one taken per message. */
export interface TokenBucket {
  /** Takes a token: `true` when there was one. */
  take(): boolean;
}

/** `now` is a monotonic millisecond clock (the server's `Clock.now`). */
export function createTokenBucket(
  ratePerSecond: number,
  burst: number,
  now: () => number,
): TokenBucket {
  let tokens = burst;
  let last = now();
  return {
    take() {
      const at = now();
      // Refilled lazily on use: no timer per connection.
      tokens = Math.min(burst, tokens + ((at - last) * ratePerSecond) / 1000);
      last = at;
      if (tokens < 1) return false;
      tokens -= 1;
      return true;
    },
  };
}
