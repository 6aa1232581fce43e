import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { type Action, isAction, type Principal } from './permissions.js';

/**
 * One configured bearer token: its SHA-256 (the server never holds the token itself), a name for
 * the logs, and what it grants.
 */
export interface TokenGrant {
  name: string;
  /** SHA-256 of the token's UTF-8 bytes, 64 lowercase hex digits. */
  sha256: string;
  /** Lock-name prefixes; `['']` (every name) when omitted. */
  prefixes?: readonly string[];
  /** Default `['lock', 'watch']`: `admin` must be granted explicitly. */
  actions?: readonly Action[];
}

/** Why a token file or `DLM_AUTH_TOKENS` could not be read. */
export class AuthConfigError extends Error {}

const HEX_64 = /^[0-9a-f]{64}$/;
const DEFAULT_ACTIONS: readonly Action[] = ['lock', 'watch'];

/** `sha256(token)` as the file stores it. */
export function hashToken(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/** A fresh token with 256 bits of entropy (`dlm_` + base64url), for `dlm-server --new-token`. */
export function newToken(): string {
  return `dlm_${randomBytes(32).toString('base64url')}`;
}

function grant(raw: unknown, where: string): TokenGrant {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new AuthConfigError(`${where}: a token must be an object`);
  const { name, sha256, prefixes, actions } = raw as Record<string, unknown>;
  if (typeof name !== 'string' || !name) throw new AuthConfigError(`${where}: name is required`);
  if (typeof sha256 !== 'string' || !HEX_64.test(sha256.toLowerCase()))
    throw new AuthConfigError(`${where}: sha256 must be 64 hex digits (sha256 of the token)`);
  if (
    prefixes !== undefined &&
    (!Array.isArray(prefixes) || !prefixes.every((p) => typeof p === 'string'))
  )
    throw new AuthConfigError(`${where}: prefixes must be a list of strings`);
  if (actions !== undefined && (!Array.isArray(actions) || !actions.every(isAction)))
    throw new AuthConfigError(`${where}: actions must be a list of lock, watch, admin`);
  return {
    name,
    sha256: sha256.toLowerCase(),
    ...(prefixes === undefined ? {} : { prefixes: prefixes as string[] }),
    ...(actions === undefined ? {} : { actions: actions as Action[] }),
  };
}

/**
 * Reads a token file: either JSON (`{"tokens": [{name, sha256, prefixes?, actions?}]}` or the bare
 * list) or lines of `NAME SHA256 [ACTIONS [PREFIX...]]` (ACTIONS comma-separated; no PREFIX means
 * every name; `#` starts a comment). An empty file configures no tokens.
 */
export function parseTokenFile(text: string): TokenGrant[] {
  const trimmed = text.trim();
  let grants: TokenGrant[];
  if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
    let json: unknown;
    try {
      json = JSON.parse(trimmed);
    } catch (error) {
      throw new AuthConfigError(`not valid JSON: ${(error as Error).message}`);
    }
    const list = Array.isArray(json) ? json : (json as { tokens?: unknown }).tokens;
    if (!Array.isArray(list)) throw new AuthConfigError('expected {"tokens": [...]} or a list');
    grants = list.map((raw, i) => grant(raw, `token ${i + 1}`));
  } else {
    grants = [];
    for (const [i, line] of text.split('\n').entries()) {
      const fields = line.replace(/#.*/, '').trim().split(/\s+/).filter(Boolean);
      if (!fields.length) continue;
      const [name, sha256, actions, ...prefixes] = fields;
      grants.push(
        grant(
          {
            name,
            sha256,
            ...(actions === undefined ? {} : { actions: actions.split(',').filter(Boolean) }),
            ...(prefixes.length ? { prefixes } : {}),
          },
          `line ${i + 1}`,
        ),
      );
    }
  }
  const seen = new Set<string>();
  for (const { name, sha256 } of grants) {
    if (seen.has(sha256)) throw new AuthConfigError(`token ${name}: the same sha256 appears twice`);
    seen.add(sha256);
  }
  return grants;
}

/** Checks presented bearer tokens against the configured ones. */
export interface Authenticator {
  /** Whether tokens are configured, so that every connection and admin request needs one. */
  readonly required: boolean;
  /** The principal `token` stands for, or null when it is none of the configured ones. */
  verify(token: string): Principal | null;
}

interface Entry {
  digest: Buffer;
  principal: Principal;
}

/**
 * Hashes the presented token and compares the digest with every configured one with
 * `crypto.timingSafeEqual`, without stopping at a match: the time taken says nothing about which
 * bytes, or which token, matched. Tokens should be random (`--new-token` makes 256-bit ones): a
 * plain SHA-256 is then as good as a slow password hash, and cheap enough for every connection.
 */
export function createAuthenticator(grants: readonly TokenGrant[]): Authenticator {
  const entries: Entry[] = grants.map((g) => ({
    digest: Buffer.from(g.sha256, 'hex'),
    principal: {
      name: g.name,
      prefixes: [...(g.prefixes ?? [''])],
      actions: new Set(g.actions ?? DEFAULT_ACTIONS),
    },
  }));
  return {
    required: entries.length > 0,
    verify(token) {
      const digest = createHash('sha256').update(token, 'utf8').digest();
      let found: Principal | null = null;
      for (const entry of entries) {
        if (timingSafeEqual(digest, entry.digest)) found = entry.principal;
      }
      return found;
    },
  };
}

/**
 * The token of an `Authorization: Bearer <token>` header: undefined without the header, null
 * when it is there but not a bearer token.
 */
export function bearerToken(header: string | undefined): string | null | undefined {
  if (header === undefined) return undefined;
  const match = /^Bearer +(\S+) *$/i.exec(header);
  return match ? match[1]! : null;
}
