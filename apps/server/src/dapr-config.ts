import { parseInteger, UsageError } from '@dlm/flags';
import type { DaprOptions } from './dapr-locks.js';

/** A Dapr component name: what a store is called in a Dapr app's calls. */
const STORE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * `--dapr-stores NAME=PREFIX,…` and `--dapr-grpc-port PORT` (or their variables) as the server's
 * Dapr options; null when neither is set (the Dapr HTTP routes then answer "not configured").
 */
export function parseDaprOptions(
  stores: string | undefined,
  grpcPort: string | undefined,
): DaprOptions | null {
  if (stores === undefined) {
    if (grpcPort !== undefined) throw new UsageError('--dapr-grpc-port needs --dapr-stores');
    return null;
  }
  const map: Record<string, string> = {};
  for (const item of stores
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean)) {
    const at = item.indexOf('=');
    const name = at < 0 ? item : item.slice(0, at);
    if (at < 0 || !STORE_NAME.test(name)) {
      throw new UsageError(
        `--dapr-stores takes NAME=PREFIX items (NAME: letters, digits, . _ -), got ${item}`,
      );
    }
    if (Object.hasOwn(map, name)) throw new UsageError(`--dapr-stores names ${name} twice`);
    map[name] = item.slice(at + 1);
  }
  if (Object.keys(map).length === 0) throw new UsageError('--dapr-stores names no store');
  if (grpcPort === undefined) return { stores: map };
  const port = parseInteger(grpcPort, '--dapr-grpc-port', { min: 0 });
  if (port > 65_535) throw new UsageError(`--dapr-grpc-port must be 0-65535, got ${grpcPort}`);
  return { stores: map, grpcPort: port };
}
