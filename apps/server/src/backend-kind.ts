import type { Clock, LockBackend } from '@dlm/core';
import type { Sources } from './config-sources.js';
import type { Logger } from './logger.js';

/** What opening a backend may use besides its config. */
export interface OpenContext {
  logger: Logger;
  /**
   * The lock service's clock, for the adapters that keep time themselves (embedded leases, the
   * Redis adapters' own deadlines); absent: the system clock.
   */
  clock?: Clock;
}

/**
 * One kind of backend `dlm-server` serves from (`--backend <kind>`): its flags, how they and
 * their environment variables are read, how it is opened, and how the log and the programs
 * that start a server (bench, faults) name it. The registry of them is `backends/index.ts`.
 */
export interface BackendKind<Config extends { kind: string }> {
  kind: Config['kind'];
  /**
   * Its flags without `--`, each with its type; each has the variable `DLM_<NAME>`
   * (`redis-url`: `DLM_REDIS_URL`). A flag of another kind is a usage error.
   */
  flags: Readonly<Record<string, 'string' | 'boolean'>>;
  /** Its lines in the help text, each flag with its variable. */
  help: string;
  /** Its config from the flags and the environment; a bad value throws `UsageError`. */
  parse(from: Sources): Config;
  /** Opens it; a store that is down now is not fatal (requests answer UNAVAILABLE meanwhile). */
  open(config: Config, context: OpenContext): Promise<LockBackend>;
  /** The config for the log, passwords hidden. */
  describe(config: Config): Record<string, unknown>;
  /** The flags that give this config: what `parse` reads back as it. */
  args(config: Config): string[];
}

/** What a kind's descriptor says besides its name: its config is `{ kind }` and its settings. */
export interface KindSpec<Kind extends string, Settings extends object> {
  flags: BackendKind<{ kind: Kind }>['flags'];
  help: string;
  /** Its settings from the flags and the environment; a bad value throws `UsageError`. */
  parse(from: Sources): Settings;
  open(config: { kind: Kind } & Settings, context: OpenContext): Promise<LockBackend>;
  describe(config: { kind: Kind } & Settings): Record<string, unknown>;
  args(config: { kind: Kind } & Settings): string[];
}

/** A kind's descriptor, its name said once: `parse` gives the settings, the kind is added. */
export function defineKind<const Kind extends string, Settings extends object>(
  kind: Kind,
  spec: KindSpec<Kind, Settings>,
): BackendKind<{ kind: Kind } & Settings> {
  const parse = (from: Sources) => ({ kind, ...spec.parse(from) });
  return Object.assign({}, spec, { kind, parse }) as BackendKind<{ kind: Kind } & Settings>;
}

/** The config a descriptor reads and opens. */
export type ConfigOf<K> = K extends BackendKind<infer Config> ? Config : never;

/**
 * Waits until an adapter is ready, when it has a notion of it. Capabilities some adapters learn
 * on connecting (Redis expiry events) are final once they are ready, and core reads them once.
 * A backend that is down now is not fatal: requests answer UNAVAILABLE until it is back, and
 * the server's health check logs the outage (and its end) and keeps /readyz at 503 meanwhile.
 */
export async function whenReady<B extends LockBackend & { ready(): Promise<void> }>(
  backend: B,
): Promise<B> {
  await backend.ready().catch(() => {});
  return backend;
}

/** A URL with its password hidden, for the log. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (!parsed.password) return url;
    parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

/** `[--name, value]` when the value is there, else nothing. */
export function optionalArg(name: string, value: string | number | undefined): string[] {
  return value === undefined ? [] : [`--${name}`, String(value)];
}
