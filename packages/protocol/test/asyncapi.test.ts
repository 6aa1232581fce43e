import { readFileSync } from 'node:fs';
import { Parser } from '@asyncapi/parser';
import { Value } from '@sinclair/typebox/value';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  Methods,
  messageSchemaFiles,
  Notifications,
  protocolAsyncApi,
  protocolMessages,
} from '../src/index.js';

type Diagnostics = Awaited<ReturnType<Parser['parse']>>['diagnostics'];

// Spectral severities: 0 error, 1 warning, 2 information, 3 hint.
const problems = (diagnostics: Diagnostics) =>
  diagnostics
    .filter((d) => d.severity <= 1)
    .map((d) => `${d.code} at ${d.path.join('/')}: ${d.message}`);

/** The parser annotates schemas with `x-parser-schema-id`; compare without them. */
function withoutParserIds(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutParserIds);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key]) => key !== 'x-parser-schema-id')
      .map(([key, item]) => [key, withoutParserIds(item)]),
  );
}

/** The ids of a parsed collection's items (an operation's messages, its reply's), in order. */
const ids = (collection: { all(): Array<{ id(): string }> }) =>
  collection.all().map((item) => item.id());

describe('AsyncAPI document', () => {
  const parser = new Parser();
  let parsed: Awaited<ReturnType<Parser['parse']>>;
  beforeAll(async () => {
    parsed = await parser.parse(JSON.stringify(protocolAsyncApi()));
  }, 60_000);

  it('is a valid AsyncAPI 3.0 document with no errors or warnings', () => {
    expect(problems(parsed.diagnostics)).toEqual([]);
    expect(parsed.document).toBeDefined();
    expect(parsed.document!.version()).toBe('3.0.0');
  });

  it('the parser does catch a broken document (negative control)', async () => {
    const broken = protocolAsyncApi() as { operations: Record<string, Record<string, unknown>> };
    broken.operations['lock.acquire']!.channel = { $ref: '#/channels/nope' };
    broken.operations['lock.get']!.action = 'publish';
    const result = await parser.parse(JSON.stringify(broken));
    expect(problems(result.diagnostics).length).toBeGreaterThan(0);
  });

  it('has an operation with request and replies for every method, and every notification', () => {
    const operations = parsed.document!.operations();
    for (const method of Object.keys(Methods)) {
      const operation = operations.get(method);
      expect(operation?.action(), method).toBe('receive');
      expect(ids(operation!.messages())).toEqual([`${method}.request`]);
      expect(ids(operation!.reply()!.messages())).toEqual([`${method}.result`, 'error']);
    }
    for (const method of Object.keys(Notifications)) {
      expect(operations.get(method)?.action(), method).toBe('send');
    }
    expect(ids(operations.get('multi.receive')!.messages())).toEqual(['multi.request']);
    expect(ids(operations.get('multi.send')!.messages())).toEqual(['multi.reply']);
    expect(operations.all()).toHaveLength(
      Object.keys(Methods).length + Object.keys(Notifications).length + 2,
    );
  });

  it('message payloads are the TypeBox frame schemas, and accept real frames', () => {
    const document = parsed.document!;
    const payloads = new Map(
      document
        .messages()
        .all()
        .map((m) => [m.id(), withoutParserIds(m.payload()?.json())]),
    );
    for (const message of protocolMessages()) {
      expect(payloads.get(message.name), message.name).toEqual(
        JSON.parse(JSON.stringify(message.schema)),
      );
    }
    const byName = new Map(protocolMessages().map((m) => [m.name, m.schema]));
    const acquire = byName.get('lock.acquire.request')!;
    expect(
      Value.Check(acquire, {
        jsonrpc: '2.0',
        id: 2,
        method: 'lock.acquire',
        params: { name: 'jobs', ttlMs: 10_000 },
      }),
    ).toBe(true);
    expect(
      Value.Check(acquire, { jsonrpc: '2.0', id: 2, method: 'lock.get', params: { name: 'j' } }),
    ).toBe(false);
    const ping = byName.get('session.ping.request')!;
    expect(Value.Check(ping, { jsonrpc: '2.0', id: 'p', method: 'session.ping' })).toBe(true);
    expect(
      Value.Check(byName.get('error')!, {
        jsonrpc: '2.0',
        id: null,
        error: { code: -32700, message: 'x', data: { code: 'PARSE_ERROR', retryable: false } },
      }),
    ).toBe(true);
    expect(
      Value.Check(byName.get('lock.lost')!, {
        jsonrpc: '2.0',
        method: 'lock.lost',
        params: { name: 'j', token: '7', reason: 'expired' },
      }),
    ).toBe(true);
    const multiRequest = byName.get('multi.request')!;
    const pingFrame = { jsonrpc: '2.0', id: 1, method: 'session.ping' };
    expect(Value.Check(multiRequest, [pingFrame, { ...pingFrame, id: 2 }])).toBe(true);
    expect(Value.Check(multiRequest, [])).toBe(false);
    expect(Value.Check(multiRequest, [pingFrame, 7])).toBe(false);
    const multiReply = byName.get('multi.reply')!;
    const lost = { name: 'j', token: '7', reason: 'expired' };
    expect(
      Value.Check(multiReply, [
        { jsonrpc: '2.0', id: 1, result: {} },
        { jsonrpc: '2.0', method: 'lock.lost', params: lost },
      ]),
    ).toBe(true);
    expect(Value.Check(multiReply, [pingFrame])).toBe(false);
  });

  it('one JSON Schema file per message, the same schemas as the AsyncAPI payloads', () => {
    const files = messageSchemaFiles();
    const doc = protocolAsyncApi() as {
      components: { messages: Record<string, { payload: Record<string, unknown> }> };
    };
    const expected = [
      ...Object.keys(Methods).flatMap((m) => [`${m}.request.json`, `${m}.result.json`]),
      'error.json',
      ...Object.keys(Notifications).map((n) => `${n}.json`),
      'multi.request.json',
      'multi.reply.json',
    ];
    expect(Object.keys(files).sort()).toEqual(expected.sort());
    for (const [file, schema] of Object.entries(files)) {
      const { $schema, $id, ...rest } = schema;
      expect($schema).toBe('https://json-schema.org/draft/2020-12/schema');
      expect($id).toMatch(/^https:\/\/dlm\.dev\/protocol\/v1\/.+\.json$/);
      expect(rest).toEqual(doc.components.messages[file.replace(/\.json$/, '')]!.payload);
    }
  });

  it('the package exports and publishes the generated documents and the transcripts', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      exports: Record<string, unknown>;
      files: string[];
    };
    expect(pkg.exports).toMatchObject({
      './asyncapi.json': './dist/asyncapi.json',
      './schemas/*': './dist/schemas/*',
      './schema.json': './dist/schema.json',
      './transcript.schema.json': './dist/transcript.schema.json',
      './transcripts/*': './transcripts/*',
    });
    expect(pkg.exports['./transcripts']).toMatchObject({ default: './dist/transcripts.js' });
    expect(pkg.files).toEqual(expect.arrayContaining(['dist', 'transcripts', 'GUIDE.md']));
    const emit = readFileSync(new URL('../scripts/emit-schema.mjs', import.meta.url), 'utf8');
    for (const output of ['asyncapi.json', 'schemas/', 'schema.json', 'transcript.schema.json'])
      expect(emit).toContain(output);
  });
});
