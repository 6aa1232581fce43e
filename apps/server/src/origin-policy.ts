import { isIP } from 'node:net';

/**
 * Which browser pages may talk to the server. Browsers send `Origin` on WebSocket upgrades and
 * cross-origin requests, and let any page open a WebSocket to any address, so without this check
 * a page on the web could drive a lock server on the visitor's machine or network.
 */
export interface OriginPolicy {
  /** Whether a request with this `Origin` (undefined: not a browser) and `Host` may proceed. */
  allows(origin: string | undefined, host: string | undefined): boolean;
}

export interface OriginPolicyOptions {
  /** Origins allowed besides the server's own (`https://ops.example.com`); `*` allows any. */
  allowedOrigins: readonly string[];
  /** Whether tokens are configured. */
  authRequired: boolean;
}

function normalize(origin: string): string | null {
  try {
    const url = new URL(origin);
    return url.origin === 'null' ? null : url.origin;
  } catch {
    return null;
  }
}

/** `localhost`, `*.localhost` or an IP literal: names that DNS rebinding cannot point here. */
function isRebindingSafe(hostname: string): boolean {
  const bare = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  return bare === 'localhost' || bare.endsWith('.localhost') || isIP(bare) !== 0;
}

/**
 * Allowed: requests without `Origin`; origins in the list (or any, with `*`); and the server's own
 * pages (the dashboard), whose origin's host is the request's `Host`. Without tokens the own-origin
 * rule also wants `Host` to be `localhost` or an IP address: a page whose DNS name was re-pointed
 * at the server (DNS rebinding) is same-origin by the letter, and there would be no token to stop
 * it. Such a deployment lists its dashboard's origin explicitly.
 */
export function createOriginPolicy(options: OriginPolicyOptions): OriginPolicy {
  const any = options.allowedOrigins.includes('*');
  const listed = new Set(
    options.allowedOrigins.map(normalize).filter((o): o is string => o !== null),
  );
  return {
    allows(origin, host) {
      if (origin === undefined || any) return true;
      const normalized = normalize(origin);
      if (normalized === null) return false;
      if (listed.has(normalized)) return true;
      if (host === undefined) return false;
      const url = new URL(normalized);
      if (url.host !== host.toLowerCase()) return false;
      return options.authRequired || isRebindingSafe(url.hostname);
    },
  };
}
