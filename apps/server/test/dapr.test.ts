import { CommunicationProtocolEnum, DaprClient, LogLevel } from '@dapr/dapr';
import { embeddedBackend } from '@dlm/adapter-embedded';
import { DlmError, type LockBackend } from '@dlm/core';
import { credentials, Client as GrpcClient, Metadata, status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken, newToken, type RunningServer, startServer } from '../src/index.js';
import { openSession, type Peer } from './ws-peer.js';

// Dapr's lock API, driven by the official Dapr JavaScript SDK (`@dapr/dapr` from npm, unmodified)
// in HTTP and in gRPC mode, pointed at dlm as it would be at a Dapr sidecar.

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** LockStatus of the SDK (not exported from its index): SUCCESS, LOCK_DOES_NOT_EXIST, … */
const UNLOCKED = { Success: 0, LockDoesNotExist: 1, LockBelongsToOthers: 2, InternalError: 3 };

let backend: LockBackend;
let server: RunningServer;
const peers: Peer[] = [];
const clients: DaprClient[] = [];

beforeAll(async () => {
  backend = await embeddedBackend();
  server = await startServer({
    port: 0,
    backend,
    dapr: { stores: { lockstore: 'dapr/', orders: 'orders/locks/' }, grpcPort: 0 },
  });
});
afterAll(async () => {
  for (const peer of peers) peer.close();
  await Promise.all(clients.map((client) => client.stop().catch(() => {})));
  await server?.close();
  await backend?.close();
});

async function session(): Promise<Peer> {
  const peer = await openSession(server.url);
  peers.push(peer);
  return peer;
}

function daprClient(mode: 'http' | 'grpc', on: RunningServer = server, token?: string): DaprClient {
  const client = new DaprClient({
    daprHost: '127.0.0.1',
    daprPort: String(mode === 'http' ? on.port : on.daprGrpcPort),
    communicationProtocol:
      mode === 'http' ? CommunicationProtocolEnum.HTTP : CommunicationProtocolEnum.GRPC,
    logger: { level: LogLevel.Error },
    ...(token ? { daprApiToken: token } : {}),
  });
  clients.push(client);
  return client;
}

/** The state of a dlm lock, as a WebSocket client sees it. */
async function dlmLock(name: string): Promise<Record<string, any>> {
  const peer = await session();
  return (await peer.call('lock.get', { name })).result;
}

describe.each(['http', 'grpc'] as const)('the Dapr SDK in %s mode', (mode) => {
  const resource = (label: string) => `${mode}-${label}`;

  it('lock, a second owner refused, renew by the same owner, unlock with each status', async () => {
    const dapr = daprClient(mode);
    const id = resource('order-17');
    expect(await dapr.lock.lock('lockstore', id, 'owner-a', 30)).toEqual({ success: true });
    const held = await dlmLock(`dapr/${id}`);
    expect(held).toMatchObject({ held: true, owner: expect.stringMatching(/^dapr:/) });
    expect(held.owner).not.toContain('owner-a');

    expect(await dapr.lock.lock('lockstore', id, 'owner-b', 30)).toEqual({ success: false });

    await sleep(1_100);
    const before = (await dlmLock(`dapr/${id}`)).ttlRemainingMs as number;
    expect(await dapr.lock.lock('lockstore', id, 'owner-a', 60)).toEqual({ success: true });
    const renewed = await dlmLock(`dapr/${id}`);
    expect(renewed.token).toBe(held.token);
    expect(renewed.ttlRemainingMs).toBeGreaterThan(before + 20_000);

    expect(await dapr.lock.unlock('lockstore', id, 'owner-b')).toEqual({
      status: UNLOCKED.LockBelongsToOthers,
    });
    expect(await dapr.lock.unlock('lockstore', id, 'owner-a')).toEqual({
      status: UNLOCKED.Success,
    });
    expect((await dlmLock(`dapr/${id}`)).held).toBe(false);
    expect(await dapr.lock.unlock('lockstore', id, 'owner-a')).toEqual({
      status: UNLOCKED.LockDoesNotExist,
    });
  });

  it('a lock expires after expiryInSeconds, and another owner takes it with a higher token', async () => {
    const dapr = daprClient(mode);
    const id = resource('expiring');
    expect(await dapr.lock.lock('orders', id, 'first', 1)).toEqual({ success: true });
    const first = await dlmLock(`orders/locks/${id}`);
    expect(first.ttlRemainingMs).toBeLessThanOrEqual(1_000);
    await sleep(1_300);
    expect(await dapr.lock.lock('orders', id, 'second', 5)).toEqual({ success: true });
    const second = await dlmLock(`orders/locks/${id}`);
    expect(BigInt(second.token)).toBeGreaterThan(BigInt(first.token));
    expect(await dapr.lock.unlock('orders', id, 'first')).toEqual({
      status: UNLOCKED.LockBelongsToOthers,
    });
  });

  it('a WebSocket client waiting for the lock is granted on the Dapr unlock', async () => {
    const dapr = daprClient(mode);
    const id = resource('handoff');
    const watcher = await session();
    await watcher.call('lock.watch', { name: `dapr/${id}` });
    expect(await dapr.lock.lock('lockstore', id, 'app', 30)).toEqual({ success: true });
    // An ordinary dlm lock: watches hear of it.
    expect((await watcher.nextNotification('lock.changed')).params).toMatchObject({
      held: true,
      owner: expect.stringMatching(/^dapr:/),
    });
    const held = await dlmLock(`dapr/${id}`);
    const waiter = await session();
    const waiting = waiter.call('lock.acquire', {
      name: `dapr/${id}`,
      ttlMs: 5_000,
      waitMs: 10_000,
    });
    await sleep(200);
    expect(await dapr.lock.unlock('lockstore', id, 'app')).toEqual({ status: UNLOCKED.Success });
    const granted = (await waiting).result;
    expect(BigInt(granted.token)).toBeGreaterThan(BigInt(held.token));
    // And the other way: Dapr is refused while the WebSocket client holds it.
    expect(await dapr.lock.lock('lockstore', id, 'app', 30)).toEqual({ success: false });
  });

  it('a store that is not configured, an empty resourceId, a non-positive expiry: errors the SDK shows', async () => {
    const dapr = daprClient(mode);
    const failures = [
      [dapr.lock.lock('nostore', 'r', 'o', 10), 'lock store nostore not found'],
      [dapr.lock.lock('lockstore', '', 'o', 10), 'ResourceId is empty in lock store lockstore'],
      [dapr.lock.lock('lockstore', 'r', '', 10), 'LockOwner is empty in lock store lockstore'],
      [dapr.lock.lock('lockstore', 'r', 'o', 0), 'ExpiryInSeconds is not positive'],
      [dapr.lock.unlock('nostore', 'r', 'o'), 'lock store nostore not found'],
    ] as const;
    for (const [call, message] of failures) {
      await expect(call).rejects.toThrow(message);
    }
  });
});

describe('Dapr over HTTP, on the wire', () => {
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${server.httpUrl}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });

  it('a successful TryLock carries the fencing token in dlm-fencing-token; a refused one does not', async () => {
    const body = { resourceId: 'wire-1', lockOwner: 'w', expiryInSeconds: 10 };
    const granted = await post('/v1.0-alpha1/lock/lockstore', body);
    expect(granted.status).toBe(200);
    expect(await granted.json()).toEqual({ success: true });
    const token = granted.headers.get('dlm-fencing-token');
    expect(token).toBe((await dlmLock('dapr/wire-1')).token);
    const refused = await post('/v1.0-alpha1/lock/lockstore', { ...body, lockOwner: 'x' });
    expect(await refused.json()).toEqual({ success: false });
    expect(refused.headers.get('dlm-fencing-token')).toBeNull();
    const unlocked = await post('/v1.0-alpha1/unlock/lockstore', {
      resource_id: 'wire-1',
      lock_owner: 'w',
    });
    expect(await unlocked.json()).toEqual({ status: 0 });
  });

  it("Dapr's status codes and error bodies", async () => {
    const cases: Array<[string, unknown, number, string]> = [
      [
        '/v1.0-alpha1/lock/nostore',
        { resourceId: 'r', lockOwner: 'o', expiryInSeconds: 5 },
        400,
        'ERR_LOCK_STORE_NOT_FOUND',
      ],
      [
        '/v1.0-alpha1/lock/lockstore',
        { lockOwner: 'o', expiryInSeconds: 5 },
        400,
        'ERR_MALFORMED_REQUEST',
      ],
      [
        '/v1.0-alpha1/lock/lockstore',
        { resourceId: 'r', lockOwner: 'o', expiryInSeconds: -3 },
        400,
        'ERR_MALFORMED_REQUEST',
      ],
      [
        '/v1.0-alpha1/lock/lockstore',
        { resourceId: 'r', lockOwner: 'o', expiryInSeconds: 1.5 },
        400,
        'ERR_MALFORMED_REQUEST',
      ],
      [
        '/v1.0-alpha1/lock/lockstore',
        { resourceId: 7, lockOwner: 'o', expiryInSeconds: 5 },
        400,
        'ERR_MALFORMED_REQUEST',
      ],
      ['/v1.0-alpha1/lock/lockstore', '{"resourceId":', 400, 'ERR_MALFORMED_REQUEST'],
      [
        '/v1.0-alpha1/lock/lockstore',
        { resourceId: 'r', lockOwner: 'o', expiryInSeconds: 100_000 },
        400,
        'ERR_MALFORMED_REQUEST',
      ],
      [
        '/v1.0-alpha1/lock/lockstore',
        { resourceId: 'a\u0001b', lockOwner: 'o', expiryInSeconds: 5 },
        400,
        'ERR_MALFORMED_REQUEST',
      ],
    ];
    for (const [path, body, statusCode, errorCode] of cases) {
      const response = await post(path, body);
      const text = await response.text();
      expect(response.status, `${path} ${text}`).toBe(statusCode);
      expect(JSON.parse(text).errorCode, text).toBe(errorCode);
    }
    const seconds = await post('/v1.0-alpha1/lock/lockstore', {
      resourceId: 'r',
      lockOwner: 'o',
      expiryInSeconds: 100_000,
    });
    expect(((await seconds.json()) as { message: string }).message).toBe(
      'ExpiryInSeconds must be 1-86400 seconds in lock store lockstore',
    );
    // protojson's ways: an expiry as a decimal string, unknown fields ignored.
    const lenient = await post('/v1.0-alpha1/lock/lockstore', {
      resourceId: 'wire-2',
      lockOwner: 'o',
      expiryInSeconds: '5',
      extra: true,
    });
    expect(await lenient.json()).toEqual({ success: true });
  });

  it("a dlm client that names a Dapr app's owner, with its own key, is another owner to Dapr", async () => {
    const peer = await session();
    const locked = await post('/v1.0-alpha1/lock/lockstore', {
      resourceId: 'impostor',
      lockOwner: 'real',
      expiryInSeconds: 1,
    });
    expect(await locked.json()).toEqual({ success: true });
    const { owner } = await dlmLock('dapr/impostor');
    expect(owner).toMatch(/^dapr:/);
    await sleep(1_300);
    // The lease ran out; a WebSocket client takes the name under the Dapr owner's (public) name.
    expect(
      (await peer.call('lock.acquire', { name: 'dapr/impostor', ttlMs: 10_000, owner })).result
        .owner,
    ).toBe(owner);
    const unlocked = await post('/v1.0-alpha1/unlock/lockstore', {
      resourceId: 'impostor',
      lockOwner: 'real',
    });
    expect(await unlocked.json()).toEqual({ status: 2 });
    expect((await dlmLock('dapr/impostor')).held).toBe(true);
  });

  it('GET /v1.0/metadata lists the stores as lock components', async () => {
    const metadata = (await (await fetch(`${server.httpUrl}/v1.0/metadata`)).json()) as any;
    expect(metadata.components).toEqual([
      { name: 'lockstore', type: 'lock.dlm', version: 'v1', capabilities: [] },
      { name: 'orders', type: 'lock.dlm', version: 'v1', capabilities: [] },
    ]);
    expect((await fetch(`${server.httpUrl}/v1.0/healthz`)).status).toBe(204);
  });
});

/** TryLockRequest in protobuf's wire format (strings 1-3, int32 4), by hand: the SDK tests above check the same field numbers through Dapr's own generated code. */
function tryLockRequest(store: string, resource: string, owner: string, seconds: number): Buffer {
  const field = (n: number, text: string) => {
    const bytes = Buffer.from(text);
    return Buffer.concat([Buffer.from([(n << 3) | 2, bytes.length]), bytes]);
  };
  return Buffer.concat([
    field(1, store),
    field(2, resource),
    field(3, owner),
    Buffer.from([4 << 3, seconds]),
  ]);
}

function grpcCall(
  port: number,
  method: string,
  request: Buffer,
  metadata = new Metadata(),
): Promise<{ code: number; details: string; trailer: Metadata; reply?: Buffer }> {
  const client = new GrpcClient(`127.0.0.1:${port}`, credentials.createInsecure());
  return new Promise((resolve) => {
    let reply: Buffer | undefined;
    const call = client.makeUnaryRequest(
      `/dapr.proto.runtime.v1.Dapr/${method}`,
      (b: Buffer) => b,
      (b: Buffer) => b,
      request,
      metadata,
      (_error, value) => {
        reply = value;
      },
    );
    call.on('status', (s) => {
      setImmediate(() => {
        client.close();
        resolve({
          code: s.code,
          details: s.details,
          trailer: s.metadata,
          ...(reply ? { reply } : {}),
        });
      });
    });
  });
}

describe('Dapr over gRPC, on the wire', () => {
  it('a successful TryLockAlpha1 carries the fencing token in the dlm-fencing-token trailer', async () => {
    const outcome = await grpcCall(
      server.daprGrpcPort!,
      'TryLockAlpha1',
      tryLockRequest('lockstore', 'grpc-wire', 'g', 10),
    );
    expect(outcome.code).toBe(status.OK);
    expect(outcome.reply).toEqual(Buffer.from([0x08, 0x01])); // success = true
    expect(outcome.trailer.get('dlm-fencing-token')).toEqual([
      (await dlmLock('dapr/grpc-wire')).token,
    ]);
  });

  it('every other method of the Dapr service is UNIMPLEMENTED, through the SDK too', async () => {
    for (const method of [
      'GetState',
      'SaveState',
      'PublishEvent',
      'SubscribeConfigurationAlpha1',
    ]) {
      expect((await grpcCall(server.daprGrpcPort!, method, Buffer.alloc(0))).code, method).toBe(
        status.UNIMPLEMENTED,
      );
    }
    await expect(daprClient('grpc').state.get('statestore', 'key')).rejects.toThrow(
      /unimplemented/i,
    );
  });

  it("Dapr's gRPC codes: INVALID_ARGUMENT for a bad request, INTERNAL for bytes that are not protobuf", async () => {
    const port = server.daprGrpcPort!;
    expect(
      (await grpcCall(port, 'TryLockAlpha1', tryLockRequest('nostore', 'r', 'o', 5))).code,
    ).toBe(status.INVALID_ARGUMENT);
    expect(
      (await grpcCall(port, 'TryLockAlpha1', tryLockRequest('lockstore', 'r', 'o', 0))).details,
    ).toBe('ExpiryInSeconds is not positive in lock store lockstore');
    expect((await grpcCall(port, 'TryLockAlpha1', Buffer.from([0x0a, 0x40, 0x61]))).code).toBe(
      status.INTERNAL,
    );
  });
});

describe('Dapr with tokens: dapr-api-token checked as a dlm token, with its prefixes', () => {
  const DAPR = newToken();
  const OTHER = newToken();
  let secured: RunningServer;
  beforeAll(async () => {
    secured = await startServer({
      port: 0,
      auth: [
        { name: 'dapr-app', sha256: hashToken(DAPR), prefixes: ['dapr/'], actions: ['lock'] },
        { name: 'other', sha256: hashToken(OTHER), prefixes: ['other/'], actions: ['lock'] },
      ],
      dapr: { stores: { lockstore: 'dapr/' }, grpcPort: 0 },
    });
  });
  afterAll(async () => secured?.close());

  it.each(['http', 'grpc'] as const)(
    'the SDK in %s mode with the token locks and unlocks',
    async (mode) => {
      const dapr = daprClient(mode, secured, DAPR);
      expect(await dapr.lock.lock('lockstore', `${mode}-secured`, 'o', 10)).toEqual({
        success: true,
      });
      expect(await dapr.lock.unlock('lockstore', `${mode}-secured`, 'o')).toEqual({ status: 0 });
    },
  );

  it('HTTP: no token or a wrong one is 401 invalid api token; a token for other prefixes is 403', async () => {
    const lock = (headers: Record<string, string>) =>
      fetch(`${secured.httpUrl}/v1.0-alpha1/lock/lockstore`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ resourceId: 'r', lockOwner: 'o', expiryInSeconds: 5 }),
      });
    for (const headers of [{}, { 'dapr-api-token': 'wrong' }]) {
      const response = await lock(headers);
      expect(response.status).toBe(401);
      expect(await response.text()).toBe('invalid api token\n');
    }
    const other = await lock({ 'dapr-api-token': OTHER });
    expect(other.status).toBe(403);
    expect(((await other.json()) as any).errorCode).toBe('ERR_PERMISSION_DENIED');
    expect((await fetch(`${secured.httpUrl}/v1.0/metadata`)).status).toBe(401);
  });

  it('gRPC: no token or a wrong one is UNAUTHENTICATED; a token for other prefixes PERMISSION_DENIED', async () => {
    const port = secured.daprGrpcPort!;
    const request = tryLockRequest('lockstore', 'r', 'o', 5);
    const withToken = (token: string) => {
      const metadata = new Metadata();
      metadata.set('dapr-api-token', token);
      return metadata;
    };
    expect((await grpcCall(port, 'TryLockAlpha1', request)).code).toBe(status.UNAUTHENTICATED);
    expect((await grpcCall(port, 'GetMetadata', Buffer.alloc(0), withToken('wrong'))).code).toBe(
      status.UNAUTHENTICATED,
    );
    expect((await grpcCall(port, 'TryLockAlpha1', request, withToken(OTHER))).code).toBe(
      status.PERMISSION_DENIED,
    );
  });
});

describe('Dapr unlock status INTERNAL_ERROR', () => {
  let broken: RunningServer;
  let brokenBackend: LockBackend;
  beforeAll(async () => {
    brokenBackend = await embeddedBackend();
    // The backend's release times out after it may have happened: the outcome is unknown.
    const release: LockBackend['release'] = async () => {
      throw new DlmError('UNAVAILABLE', 'the backend did not answer the release', {
        indeterminate: true,
      });
    };
    broken = await startServer({
      port: 0,
      backend: Object.assign(Object.create(brokenBackend) as LockBackend, { release }),
      dapr: { stores: { lockstore: 'dapr/' }, grpcPort: 0 },
    });
  });
  afterAll(async () => {
    await broken?.close();
    await brokenBackend?.close();
  });

  it.each(['http', 'grpc'] as const)(
    'in %s mode, an unlock whose outcome is unknown answers INTERNAL_ERROR (3)',
    async (mode) => {
      const dapr = daprClient(mode, broken);
      expect(await dapr.lock.lock('lockstore', `${mode}-unknown`, 'o', 10)).toEqual({
        success: true,
      });
      expect(await dapr.lock.unlock('lockstore', `${mode}-unknown`, 'o')).toEqual({
        status: UNLOCKED.InternalError,
      });
    },
  );
});
