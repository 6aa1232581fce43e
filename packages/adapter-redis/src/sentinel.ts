import { DlmError } from '@dlm/core';
import { Redis } from 'ioredis';
import { commandConnectionOptions } from './connections.js';
import { type HostPort, parseHostPorts } from './host-ports.js';

/**
 * Redis Sentinel: the adapter asks the sentinels which server is the master (ioredis's sentinel
 * support), and asks again whenever the connection drops, so after a failover it follows the
 * promoted replica. The events
 * connection is a `duplicate()` of the command connection and so follows the master the same way.
 */

export type SentinelAddress = HostPort;

/** `host:port` items (or addresses) as addresses; INVALID_PARAMS for one that is not. */
export function parseSentinels(
  sentinels: ReadonlyArray<string | SentinelAddress>,
): SentinelAddress[] {
  return parseHostPorts(sentinels, 'sentinels');
}

/** The password and database of a `redis://[:password@]host[/db]` URL, for the master. */
function credentialsOf(url: string | undefined): {
  password?: string;
  username?: string;
  db?: number;
} {
  if (url === undefined) return {};
  const parsed = new URL(url);
  const db = Number(parsed.pathname.slice(1) || 0);
  return Object.assign(
    {},
    parsed.password ? { password: decodeURIComponent(parsed.password) } : {},
    parsed.username ? { username: decodeURIComponent(parsed.username) } : {},
    db > 0 ? { db } : {},
  );
}

/**
 * The command connection to the master that `sentinels` name `name`, with the same fail-fast
 * settings as a direct connection. `url` may carry the master's password and database.
 */
export function createSentinelConnection(options: {
  sentinels: SentinelAddress[];
  name: string;
  timeoutMs: number;
  url?: string;
}): Redis {
  if (!options.name) {
    throw new DlmError('INVALID_PARAMS', 'sentinelName is required with sentinels', {
      field: 'sentinelName',
    });
  }
  const client = new Redis(
    Object.assign({}, commandConnectionOptions(options.timeoutMs), credentialsOf(options.url), {
      sentinels: options.sentinels,
      name: options.name,
      role: 'master',
      // Not ioredis's `failoverDetector`: its +switch-master handler disconnects a connection
      // that may be mid-way through connecting, and ioredis then ends the client for good
      // ("Connection is closed." on every later command; seen in the fault harness). A killed
      // master closes the socket anyway, and a silent one is torn down by `socketTimeout`.
      // Keep asking the sentinels (every 100 ms, then up to every second) while none answers.
      sentinelRetryStrategy: (attempt: number) => Math.min(100 * attempt, 1_000),
    }),
  );
  client.on('error', () => {});
  return client;
}
