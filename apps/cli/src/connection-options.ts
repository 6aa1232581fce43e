import { readFileSync } from 'node:fs';
import { type ClientOptions, createClient, type DlmClient } from '@dlm/client';
import { UsageError } from '@dlm/flags';
import { serverUrl } from './server-url.js';

/** Where a command finds its server and how it proves who it is. */
export interface ConnectionOptions {
  url: string;
  /** The bearer token, when the server requires one. */
  token: string | undefined;
  /** The CA that issued a `wss://`/`https://` server's certificate, when Node does not trust it. */
  ca: Buffer | undefined;
}

/** The flags behind `ConnectionOptions`, shared by every command that talks to a server. */
export const CONNECTION_FLAGS = {
  server: { type: 'string' },
  'token-file': { type: 'string' },
  ca: { type: 'string' },
} as const;

function read(path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new UsageError(`cannot read ${what} ${path}: ${(error as Error).message}`);
  }
}

/**
 * `--server`/`DLM_URL`, the token from `--token-file`, `DLM_TOKEN` or `DLM_TOKEN_FILE` (never a
 * flag with the token itself: other users would see it in `ps`), and `--ca`/`DLM_CA`.
 */
export function connectionOptions(
  values: { server?: string; 'token-file'?: string; ca?: string },
  env: NodeJS.ProcessEnv = process.env,
): ConnectionOptions {
  const tokenFile = values['token-file'] ?? (env.DLM_TOKEN ? undefined : env.DLM_TOKEN_FILE);
  const token = tokenFile
    ? read(tokenFile, 'the token file').toString('utf8').trim()
    : env.DLM_TOKEN;
  const caFile = values.ca ?? env.DLM_CA;
  return {
    url: serverUrl(values.server, env),
    token: token || undefined,
    ca: caFile ? read(caFile, 'the CA file') : undefined,
  };
}

/** The client options for a connection: URL, token in `session.hello`, CA for TLS. */
export function clientOptions(
  connection: ConnectionOptions,
): Pick<ClientOptions, 'url' | 'auth' | 'tls'> {
  return {
    url: connection.url,
    ...(connection.token ? { auth: connection.token } : {}),
    ...(connection.ca ? { tls: { ca: connection.ca } } : {}),
  };
}

/** The usage lines for the connection flags. */
export const CONNECTION_USAGE = `  --server URL       the server (DLM_URL, default ws://127.0.0.1:7070/v1/ws)
  --token-file FILE  the server's bearer token, read from FILE (or DLM_TOKEN, DLM_TOKEN_FILE)
  --ca FILE          PEM of the CA that issued the server's TLS certificate (DLM_CA)`;

/** A client for a command that asks one thing and ends: its connection flags, no reconnecting. */
export function oneShotClient(values: Parameters<typeof connectionOptions>[0]): DlmClient {
  return createClient({
    ...clientOptions(connectionOptions(values)),
    name: 'dlm-cli',
    reconnect: false,
  });
}
