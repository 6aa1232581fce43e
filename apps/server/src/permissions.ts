/** What a token may do: `lock` (acquire, release, extend, get, check), `watch` (get, check, watch, watchPrefix), `admin` (the admin HTTP API, revocation). */
export type Action = 'lock' | 'watch' | 'admin';

export const ACTIONS: readonly Action[] = ['lock', 'watch', 'admin'];

export function isAction(value: unknown): value is Action {
  return typeof value === 'string' && (ACTIONS as readonly string[]).includes(value);
}

/** Who a connection or an HTTP request speaks for, and what it may touch. */
export interface Principal {
  /** The token's name, for logs (never the token). */
  readonly name: string;
  /** Lock-name prefixes it may touch; `''` is every name. */
  readonly prefixes: readonly string[];
  readonly actions: ReadonlySet<Action>;
}

/** Everything, for a server without tokens (which only binds loopback unless told otherwise). */
export const ANONYMOUS: Principal = {
  name: 'anonymous',
  prefixes: [''],
  actions: new Set(ACTIONS),
};

/** Whether `principal` may do `action` on the lock `name`. */
export function allows(principal: Principal, action: Action, name: string): boolean {
  return principal.actions.has(action) && principal.prefixes.some((p) => name.startsWith(p));
}

/**
 * Whether `principal` may do `action` on every name under `prefix` (watching or listing a
 * prefix): `prefix` must lie inside one of its prefixes, so `jobs/` may watch `jobs/nightly/`
 * but not `''`.
 */
export function allowsPrefix(principal: Principal, action: Action, prefix: string): boolean {
  return principal.actions.has(action) && principal.prefixes.some((p) => prefix.startsWith(p));
}
