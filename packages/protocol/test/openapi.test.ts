import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import { describe, expect, it } from 'vitest';
import {
  httpMethods,
  isHttpMethod,
  Methods,
  OPENAPI_PATH,
  protocolMessages,
  protocolOpenApi,
  RPC_PATH,
} from '../src/index.js';

const checkedIn = new URL('../openapi.json', import.meta.url);

interface Document {
  paths: Record<string, Record<string, { requestBody?: unknown; responses: object }>>;
  components: { schemas: Record<string, unknown> };
}

describe('OpenAPI document of POST /v1/rpc', () => {
  it('the checked-in openapi.json is the one the schemas generate (else: pnpm --filter @dlm/protocol build)', () => {
    expect(readFileSync(checkedIn, 'utf8')).toBe(`${JSON.stringify(protocolOpenApi(), null, 2)}\n`);
  });

  it('is a valid OpenAPI 3.1 document', async () => {
    const validator = new Validator();
    const result = await validator.validate(protocolOpenApi());
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
  });

  it('the validator does catch a broken document (negative control)', async () => {
    const broken = protocolOpenApi() as unknown as Document;
    broken.paths[RPC_PATH]!.post!.responses = { 200: { content: {} } };
    const result = await new Validator().validate(broken as unknown as Record<string, unknown>);
    expect(result.valid).toBe(false);
  });

  it('serves the lock methods, not the session ones, with the frames of the AsyncAPI document', () => {
    expect(httpMethods()).toEqual([
      'lock.acquire',
      'lock.acquireAll',
      'lock.release',
      'lock.extend',
      'lock.get',
      'lock.requestRelease',
      'lock.check',
    ]);
    for (const method of ['session.hello', 'session.ping', 'lock.watch', 'lock.watchPrefix'])
      expect(isHttpMethod(method), method).toBe(false);
    expect(isHttpMethod('toString')).toBe(false);
    const doc = protocolOpenApi() as unknown as Document;
    expect(Object.keys(doc.paths)).toEqual([RPC_PATH, OPENAPI_PATH]);
    const frames = new Map(protocolMessages().map((m) => [m.name, m.schema]));
    const expected = [...httpMethods().flatMap((m) => [`${m}.request`, `${m}.result`]), 'error'];
    expect(Object.keys(doc.components.schemas)).toEqual(expected);
    for (const name of expected) {
      const { 'x-error-codes': _codes, ...schema } = doc.components.schemas[name] as Record<
        string,
        unknown
      >;
      expect(schema, name).toEqual(JSON.parse(JSON.stringify(frames.get(name))));
    }
    expect(Object.keys(Methods)).toEqual(expect.arrayContaining(httpMethods()));
  });

  it('the package exports and publishes the checked-in copy', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      exports: Record<string, unknown>;
      files: string[];
    };
    expect(pkg.exports['./openapi.json']).toBe('./openapi.json');
    expect(pkg.files).toContain('openapi.json');
  });
});
