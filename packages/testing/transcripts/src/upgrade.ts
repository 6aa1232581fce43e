import { SUBPROTOCOL } from '@dlm/protocol';
import type { TranscriptStep } from '@dlm/protocol/transcripts';
import WebSocket from 'ws';
import { show } from './frames.js';

export type ConnectStep = Extract<TranscriptStep, { connect: unknown }>;

/** How a WebSocket upgrade ended: open, refused with an HTTP status, or failed. */
type Outcome = { open: true } | { status: number } | { error: Error };

/** Opens a socket to `url` as a `connect` step asks (its path and subprotocols). */
async function upgrade(
  url: string,
  spec: ConnectStep['connect'],
  timeoutMs: number,
): Promise<{ ws: WebSocket; outcome: Outcome }> {
  const target = new URL(url);
  if (spec.path !== undefined) target.pathname = spec.path;
  const protocols = spec.protocols ?? [SUBPROTOCOL];
  const ws = new WebSocket(target, protocols.length ? protocols : undefined, {
    perMessageDeflate: false,
    handshakeTimeout: timeoutMs,
  });
  const outcome = await new Promise<Outcome>((resolve) => {
    ws.once('open', () => resolve({ open: true }));
    ws.once('unexpected-response', (request, response) => {
      resolve({ status: response.statusCode ?? 0 });
      response.resume();
      request.destroy();
    });
    ws.once('error', (error) => resolve({ error }));
  });
  ws.on('error', () => {});
  return { ws, outcome };
}

/**
 * Performs a `connect` step's upgrade and checks it against the step's expectations
 * (`expectStatus`, `expectProtocol`). Resolves with the open socket, or undefined when the
 * upgrade was refused as expected; `fail` throws.
 */
export async function connectAsExpected(
  url: string,
  spec: ConnectStep['connect'],
  timeoutMs: number,
  fail: (message: string) => never,
): Promise<WebSocket | undefined> {
  const { ws, outcome } = await upgrade(url, spec, timeoutMs);
  const { expectStatus, expectProtocol } = spec;
  if ('error' in outcome) fail(`could not connect: ${outcome.error.message}`);
  if ('status' in outcome) {
    if (expectStatus === undefined) fail(`the upgrade was refused with HTTP ${outcome.status}`);
    if (outcome.status !== expectStatus) {
      fail(`the upgrade was refused with HTTP ${outcome.status}, not ${expectStatus}`);
    }
    return undefined;
  }
  if (expectStatus !== undefined) {
    ws.terminate();
    fail(`the upgrade succeeded; expected HTTP ${expectStatus}`);
  }
  const picked = ws.protocol === '' ? null : ws.protocol;
  if (expectProtocol !== undefined && picked !== expectProtocol) {
    ws.terminate();
    fail(`the server picked subprotocol ${show(picked)}, not ${show(expectProtocol)}`);
  }
  return ws;
}
