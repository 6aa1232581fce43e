import { UsageError } from '@dlm/flags';

/** Where the server is when neither `--server` nor `DLM_URL` says. */
export const DEFAULT_SERVER_URL = 'ws://127.0.0.1:7070/v1/ws';

/** `--server` wins over `DLM_URL`, which wins over the default. */
export function serverUrl(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const url = flag || env.DLM_URL || DEFAULT_SERVER_URL;
  try {
    const parsed = new URL(url);
    if (!['ws:', 'wss:', 'http:', 'https:'].includes(parsed.protocol)) throw new Error();
  } catch {
    // `localhost:7171` parses, as scheme `localhost:`: say what was probably meant.
    const hint = /^[\w.-]+:\d+/.test(url) ? ` (no scheme: did you mean ws://${url}?)` : '';
    throw new UsageError(
      `--server must be a ws://, wss://, http:// or https:// URL, got ${url}${hint}`,
    );
  }
  return url;
}

/** The HTTP base of the same server (`http://host:port`), for the admin API. */
export function httpBase(url: string): string {
  const parsed = new URL(url);
  const protocol = parsed.protocol === 'wss:' || parsed.protocol === 'https:' ? 'https:' : 'http:';
  return `${protocol}//${parsed.host}`;
}
