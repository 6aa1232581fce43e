import type { AddressInfo } from 'node:net';
import {
  loadTranscripts,
  runTranscript,
  type Transcript,
  TranscriptFailure,
} from '@dlm/transcripts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { type RunningServer, startServer } from '../src/index.js';
import { serverConfigurations } from './server-configurations.js';
import { replayTranscripts } from './transcript-replays.js';

const transcripts = loadTranscripts();
const byName = new Map(transcripts.map((t) => [t.name, t]));

/** A transcript of the runner's own, written for one deviation. */
function runnerCase(name: string, description: string, steps: Transcript['steps']): Transcript {
  return { name, description, covers: ['runner'], steps };
}

/** owner `o` acquires `{{run}}/g` for 10 s (request `id`). */
function acquireStep(id: number) {
  const params = { name: '{{run}}/g', ttlMs: 10_000, owner: 'o' };
  return { send: { jsonrpc: '2.0', id, method: 'lock.acquire', params } };
}

/** The grant of {@link acquireStep}'s request `id`, its token matched by `token`. */
function grantStep(id: number, token: unknown) {
  const result = {
    name: '{{run}}/g',
    owner: 'o',
    token,
    ttlMs: 10_000,
    leaseKey: { $any: 'string' },
    mode: 'exclusive',
  };
  return { expect: { jsonrpc: '2.0', id, result } };
}

/** A deep copy of a shipped transcript with `edit` applied, for the runner's negative controls. */
function variant(name: string, edit: (t: Transcript) => void): Transcript {
  const copy = structuredClone(byName.get(name)!);
  edit(copy);
  return copy;
}

const HELLO = [
  { connect: {} },
  { send: { jsonrpc: '2.0', id: 0, method: 'session.hello' } },
  { expect: { jsonrpc: '2.0', id: 0, result: { $any: 'object' } } },
];

it('there are transcripts to replay', () => {
  expect(transcripts.length).toBeGreaterThanOrEqual(25);
});

// The README runs the server journaled by default, so that goes first (its grants reach the disk
// before their answer does, which once left `lock.watchPrefix` without a second holder's TTL);
// the external backends replay in transcripts-backends.test.ts.
replayTranscripts(serverConfigurations().filter((configuration) => configuration.embedded));

// The runner must fail when the server does not do what a transcript says; otherwise the
// replays above would prove nothing.
describe('the transcript runner catches deviations', () => {
  let server: RunningServer;
  beforeAll(async () => {
    server = await startServer({ port: 0 });
  });
  afterAll(async () => {
    await server.close();
  });

  const fails = async (transcript: Transcript, message: RegExp) => {
    const error = await runTranscript(server.url, transcript, { defaultTimeoutMs: 1_000 }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(TranscriptFailure);
    expect((error as Error).message).toMatch(message);
  };

  it('a token that should have increased but was expected equal', async () => {
    await fails(
      variant('tokens-increase', (t) => {
        const step = t.steps.find(
          (s) => 'expect' in s && JSON.stringify(s.expect).includes('"$capture":"t2"'),
        ) as { expect: { result: { token: unknown } } };
        step.expect.result.token = { $ref: 't1' };
      }),
      /is not t1/,
    );
  });

  it('an equal token where a greater one is expected', async () => {
    await fails(
      runnerCase('gt-control', 'the same owner gets the same token, which is not greater', [
        ...HELLO,
        acquireStep(1),
        grantStep(1, { $capture: 't1' }),
        acquireStep(2),
        { ...grantStep(2, { $gt: 't1' }), timeoutMs: 300 },
      ]),
      /is not greater than t1/,
    );
  });

  it('a wrong error code', async () => {
    await fails(
      variant('method-not-found', (t) => {
        const step = t.steps.find((s) => 'expect' in s && JSON.stringify(s).includes('-32601'))!;
        (step as { expect: { error: { code: number } } }).expect.error.code = -32600;
        (step as { timeoutMs?: number }).timeoutMs = 300;
      }),
      /expected -32600, got -32601/,
    );
  });

  it('a reply that arrives sooner than the transcript allows', async () => {
    await fails(
      variant('lock-lost', (t) => {
        for (const s of t.steps) if ('elapsed' in s && s.elapsed) s.elapsed.min = 5_000;
      }),
      /before 5000/,
    );
  });

  it('a frame nobody expected', async () => {
    await fails(
      runnerCase('extra-frame', 'two pings, one expected', [
        ...HELLO,
        { send: { jsonrpc: '2.0', id: 1, method: 'session.ping' }, times: 2 },
        { expect: { jsonrpc: '2.0', id: 1, result: {} } },
        { sleep: 100 },
      ]),
      /received frames no step expected/,
    );
  });

  it('a frame that expectNone forbids', async () => {
    await fails(
      runnerCase('expect-none', 'a reply arrives during expectNone', [
        ...HELLO,
        { send: { jsonrpc: '2.0', id: 1, method: 'session.ping' } },
        { expectNone: { $any: 'value' }, forMs: 300 },
      ]),
      /should not have/,
    );
  });

  it('a wrong close code, and an upgrade that succeeds when it should be refused', async () => {
    await fails(
      variant('frame-size', (t) => {
        for (const s of t.steps) if ('expectClose' in s) s.expectClose.code = 1000;
      }),
      /closed with code 1009, not 1000/,
    );
    await fails(
      runnerCase('not-refused', 'dlm.v1.json is accepted', [
        { connect: { protocols: ['dlm.v1.json'], expectStatus: 400 } },
      ]),
      /upgrade succeeded/,
    );
  });

  it('a frame that does not match the protocol schema, even if the pattern accepts it', async () => {
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    wss.on('connection', (ws) =>
      ws.on('message', (data) => {
        const { id } = JSON.parse(data.toString()) as { id: number };
        // A hello result without sessionId.
        ws.send(JSON.stringify({ jsonrpc: '2.0', id, result: { protocol: 'dlm.v1' } }));
      }),
    );
    await new Promise((resolve) => wss.once('listening', resolve));
    const { port } = wss.address() as AddressInfo;
    try {
      const error = await runTranscript(
        `ws://127.0.0.1:${port}/v1/ws`,
        runnerCase(
          'off-schema',
          'a fake server answering hello off-schema',
          HELLO as Transcript['steps'],
        ),
      ).catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/session\.hello result off-schema/);
    } finally {
      for (const client of wss.clients) client.terminate();
      await new Promise((resolve) => wss.close(resolve));
    }
  });

  it('an array frame on a connection that did not ask for multi-message frames', async () => {
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    wss.on('connection', (ws) =>
      ws.on('message', (data) => {
        const { id } = JSON.parse(data.toString()) as { id: number };
        // The server groups replies although the hello did not ask for it.
        ws.send(JSON.stringify([{ jsonrpc: '2.0', id, result: {} }]));
      }),
    );
    await new Promise((resolve) => wss.once('listening', resolve));
    const { port } = wss.address() as AddressInfo;
    const steps = [
      { connect: {} },
      { send: { jsonrpc: '2.0', id: 1, method: 'session.ping' } },
      { expect: { jsonrpc: '2.0', id: 1, result: {} } },
    ] as Transcript['steps'];
    try {
      const url = `ws://127.0.0.1:${port}/v1/ws`;
      const error = await runTranscript(
        url,
        runnerCase('array-unasked', 'a fake server sending an array frame', steps),
        { defaultTimeoutMs: 1_000 },
      ).catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/did not ask for multi-message frames/);
      // The same frame on a connection that asked is its message, and passes.
      const asked = structuredClone(steps);
      (asked[0] as { connect: { multi?: boolean } }).connect.multi = true;
      await runTranscript(url, runnerCase('array-asked', 'the same, asked for', asked));
    } finally {
      for (const client of wss.clients) client.terminate();
      await new Promise((resolve) => wss.close(resolve));
    }
  });
});
