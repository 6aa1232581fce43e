import type { LockBackend } from '@dlm/core';
import { UsageError } from '@dlm/flags';
import type { BackendKind, ConfigOf, OpenContext } from '../backend-kind.js';
import type { Sources } from '../config-sources.js';
import { embedded } from './embedded.js';
import { etcd } from './etcd.js';
import { postgres } from './postgres.js';
import { redis } from './redis.js';
import { redlock } from './redlock.js';
import { zookeeper } from './zookeeper.js';

/**
 * Every kind of backend `dlm-server` serves from, in the help text's order: the one list the
 * server's flags, help, parsing, opening and log read, and bench and faults build their
 * servers' flags from. A new backend is a file in this folder and its entry here.
 */
export const BACKEND_KINDS = [embedded, redis, redlock, etcd, zookeeper, postgres] as const;

type Kinds = (typeof BACKEND_KINDS)[number];

/** A backend's config, as `--backend` and its flags give it. */
export type BackendConfig = ConfigOf<Kinds>;

export const BACKEND_KIND_NAMES: readonly BackendConfig['kind'][] = BACKEND_KINDS.map(
  (entry) => entry.kind,
);

function kindOf<Config extends BackendConfig>(config: Config): BackendKind<Config> {
  return BACKEND_KINDS.find(
    (entry) => entry.kind === config.kind,
  ) as unknown as BackendKind<Config>;
}

/** The kind `--backend` (or `DLM_BACKEND`) names; any other is a usage error. */
function namedKind(kind: string): Kinds {
  const entry = BACKEND_KINDS.find((candidate) => candidate.kind === kind);
  if (!entry)
    throw new UsageError(`--backend must be ${BACKEND_KIND_NAMES.join('|')}, got ${kind}`);
  return entry;
}

/** Every backend flag, with its type, for the flag parser. */
export const BACKEND_FLAG_TYPES: Readonly<Record<string, { type: 'string' | 'boolean' }>> =
  Object.fromEntries(
    BACKEND_KINDS.flatMap((entry) =>
      Object.entries(entry.flags).map(([name, type]) => [name, { type }]),
    ),
  );

/**
 * A flag for another backend than the one chosen is a mistake the user should hear of, not a
 * setting silently ignored (`--memory --backend redis` would otherwise serve Redis).
 * Environment variables may be set for several backends at once, so only flags are checked.
 */
function checkBackendFlags({ values, flag, env }: Sources, kind: string): void {
  /** Where the backend's choice came from, when not from --backend. */
  const source =
    flag('backend') !== undefined ? '' : env.DLM_BACKEND ? ' (DLM_BACKEND)' : ' (the default)';
  for (const owner of BACKEND_KINDS) {
    if (owner.kind === kind) continue;
    const given = Object.keys(owner.flags).find((name) => values[name] !== undefined);
    if (given !== undefined)
      throw new UsageError(
        `--${given} is for --backend ${owner.kind}, but the backend is ${kind}${source}`,
      );
  }
}

/** `--backend` (default embedded) and its flags, read into its config. */
export function parseBackend(from: Sources): BackendConfig {
  const entry = namedKind(from.setting('backend') ?? 'embedded');
  checkBackendFlags(from, entry.kind);
  return entry.parse(from);
}

/** Opens the configured backend, importing its adapter only now. */
export function openBackendOf(config: BackendConfig, context: OpenContext): Promise<LockBackend> {
  return kindOf(config).open(config, context);
}

/** The config for the log, passwords hidden. */
export function describeBackend(config: BackendConfig): Record<string, unknown> {
  return kindOf(config).describe(config);
}

/**
 * The `dlm-server` flags that give `config` (`['--backend', 'etcd', '--etcd-endpoints', …]`):
 * what bench and the fault harness start their servers with.
 */
export function backendArgs(config: BackendConfig): string[] {
  return kindOf(config).args(config);
}

/** The backend options of the help text. */
export function backendHelp(): string {
  return BACKEND_KINDS.map((entry) => entry.help).join('\n');
}
