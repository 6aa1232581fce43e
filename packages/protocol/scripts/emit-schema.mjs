// Writes the published JSON documents from the built schemas (run after tsc by `build`):
// dist/schema.json (the whole protocol), dist/asyncapi.json (AsyncAPI 3.0),
// dist/schemas/<message>.json (one JSON Schema per message) and dist/transcript.schema.json
// (the format of the golden transcripts); and openapi.json (OpenAPI 3.1 of POST /v1/rpc) beside
// package.json, where it is checked in: test/openapi.test.ts fails when it is not current.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { messageSchemaFiles, protocolAsyncApi } from '../dist/asyncapi.js';
import { protocolJsonSchema } from '../dist/json-schema.js';
import { protocolOpenApi } from '../dist/openapi.js';
import { transcriptJsonSchema } from '../dist/transcript-format.js';

const dist = new URL('../dist/', import.meta.url);
const write = (path, value) =>
  writeFileSync(new URL(path, dist), `${JSON.stringify(value, null, 2)}\n`);

write('schema.json', protocolJsonSchema());
write('asyncapi.json', protocolAsyncApi());
write('transcript.schema.json', transcriptJsonSchema());
rmSync(new URL('schemas/', dist), { recursive: true, force: true });
mkdirSync(new URL('schemas/', dist));
for (const [file, schema] of Object.entries(messageSchemaFiles())) write(`schemas/${file}`, schema);
writeFileSync(
  new URL('../openapi.json', import.meta.url),
  `${JSON.stringify(protocolOpenApi(), null, 2)}\n`,
);
