// Writes dist/schema.json from the built schemas (run after tsc by `build`).
import { writeFileSync } from 'node:fs';
import { protocolJsonSchema } from '../dist/json-schema.js';

writeFileSync(
  new URL('../dist/schema.json', import.meta.url),
  `${JSON.stringify(protocolJsonSchema(), null, 2)}\n`,
);
