import { DlmError } from '@dlm/core';
import type { ServerLimits } from './limits.js';
import { createTokenBucket, type TokenBucket } from './token-bucket.js';

/** One client address's requests through the HTTP doors: in flight, and its rate bucket. */
interface AddressUse {
  inflight: number;
  bucket: TokenBucket | undefined;
  lastAt: number;
}

/** Addresses kept at most before idle ones are swept (each entry is a few dozen bytes). */
const SWEEP_AT = 10_000;

export interface AddressLimits {
  /**
   * Admits one request from `address`: the function that ends it (call it once, when answered),
   * or LIMIT_EXCEEDED when the address has `maxInflight` requests in flight or sends faster
   * than `messagesPerSecond` (when set).
   */
  admit(address: string): (() => void) | DlmError;
}

/**
 * The WebSocket's per-connection limits, per client address for the HTTP doors (which have no
 * connection that lasts): requests in flight, waits included, and the message rate.
 */
export function createAddressLimits(
  limits: Pick<ServerLimits, 'maxInflight' | 'messagesPerSecond' | 'messageBurst'>,
  now: () => number,
): AddressLimits {
  const uses = new Map<string, AddressUse>();
  const { maxInflight, messagesPerSecond, messageBurst } = limits;
  /** How long an unused bucket takes to be full again: after that it can be forgotten. */
  const refillMs = messagesPerSecond > 0 ? (messageBurst / messagesPerSecond) * 1000 : 0;

  function sweep(at: number): void {
    for (const [address, use] of uses) {
      if (use.inflight === 0 && at - use.lastAt >= refillMs) uses.delete(address);
    }
  }

  function useOf(address: string, at: number): AddressUse {
    let use = uses.get(address);
    if (!use) {
      if (uses.size >= SWEEP_AT) sweep(at);
      use = {
        inflight: 0,
        bucket:
          messagesPerSecond > 0
            ? createTokenBucket(messagesPerSecond, messageBurst, now)
            : undefined,
        lastAt: at,
      };
      uses.set(address, use);
    }
    use.lastAt = at;
    return use;
  }

  return {
    admit(address) {
      const at = now();
      const use = useOf(address, at);
      if (use.bucket && !use.bucket.take()) {
        return new DlmError(
          'LIMIT_EXCEEDED',
          `at most ${messagesPerSecond} requests per second from one address (bursts of ${messageBurst})`,
        );
      }
      if (use.inflight >= maxInflight) {
        return new DlmError(
          'LIMIT_EXCEEDED',
          `at most ${maxInflight} requests may be in flight from one address`,
        );
      }
      use.inflight += 1;
      let ended = false;
      return () => {
        if (ended) return;
        ended = true;
        use.inflight -= 1;
        // Without a rate there is nothing to remember once the address is idle.
        if (use.inflight === 0 && !use.bucket) uses.delete(address);
      };
    },
  };
}
