import { Methods, Notifications } from './schemas.js';

/**
 * The protocol as one JSON Schema document (draft 2020-12), emitted from the same schemas the
 * TypeScript types come from. Published as `@dlm/protocol/schema.json`.
 */
export function protocolJsonSchema(): Record<string, unknown> {
  const defs: Record<string, unknown> = {};
  for (const [method, { params, result }] of Object.entries(Methods)) {
    defs[`${method}.params`] = params;
    defs[`${method}.result`] = result;
  }
  for (const [method, params] of Object.entries(Notifications)) {
    defs[`${method}.params`] = params;
  }
  return JSON.parse(
    JSON.stringify({
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      $id: 'https://dlm.dev/protocol/dlm.v1.schema.json',
      title: 'dlm protocol v1 (JSON-RPC 2.0 over WebSocket, subprotocol dlm.v1.json)',
      $defs: defs,
    }),
  );
}
