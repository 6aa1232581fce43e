import { DlmError } from '@dlm/core';
import { WS_PATH } from '@dlm/protocol';

/**
 * The server's URL as `ws(s)://host:port/path`. A URL that cannot work is INVALID_PARAMS at
 * once, from `createClient`: left to the WebSocket it would only fail on every reconnect, and
 * `localhost:7171` (no scheme) even parses, as scheme `localhost:`.
 */
export function normalizeUrl(url: string): string {
  const invalidUrl = (why: string) =>
    new DlmError(
      'INVALID_PARAMS',
      `url must be a ws://, wss://, http:// or https:// URL, got ${JSON.stringify(url)}: ${why}`,
      { field: 'url' },
    );
  if (typeof url !== 'string') throw invalidUrl('not a string');
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw invalidUrl(
      /^[\w.-]+:\d+/.test(url) ? `no scheme (did you mean ws://${url}?)` : 'not a URL',
    );
  }
  if (!['ws:', 'wss:', 'http:', 'https:'].includes(parsed.protocol)) {
    throw invalidUrl(
      /^[\w.-]+:\d+/.test(url)
        ? `no scheme (did you mean ws://${url}?)`
        : `unsupported scheme ${parsed.protocol}`,
    );
  }
  if (!parsed.hostname) throw invalidUrl('no host');
  if (parsed.protocol === 'http:') parsed.protocol = 'ws:';
  else if (parsed.protocol === 'https:') parsed.protocol = 'wss:';
  if (parsed.pathname === '/' || parsed.pathname === '') parsed.pathname = WS_PATH;
  return parsed.toString();
}
