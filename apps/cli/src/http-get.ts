import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { ConnectionOptions } from './connection-options.js';

/**
 * GETs `url` and parses its JSON body, with the connection's bearer token and CA (Node's
 * `fetch` takes no CA of its own, hence `node:http(s)`).
 */
export function getJson(
  url: string,
  connection: ConnectionOptions,
  timeoutMs: number,
): Promise<{ status: number; body: unknown }> {
  const parsed = new URL(url);
  const request = parsed.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(
      parsed,
      {
        method: 'GET',
        headers: {
          accept: 'application/json',
          ...(connection.token ? { authorization: `Bearer ${connection.token}` } : {}),
        },
        ...(connection.ca ? { ca: connection.ca } : {}),
        timeout: timeoutMs,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          try {
            resolve({
              status: response.statusCode ?? 0,
              body: JSON.parse(Buffer.concat(chunks).toString('utf8')),
            });
          } catch {
            reject(new Error(`HTTP ${response.statusCode}: not JSON`));
          }
        });
        response.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}
