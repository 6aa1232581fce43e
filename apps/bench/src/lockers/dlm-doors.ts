import { Agent, request } from 'node:http';
import { CommunicationProtocolEnum, DaprClient, LogLevel } from '@dapr/dapr';
import { freePort } from '@dlm/test-services';
import { startServerProcess } from '../server-process.js';
import { type Locker, type RunningTarget, type Target, WaitTimeout } from './locker.js';

/**
 * dlm's other doors, beside the WebSocket's: the lock methods over `POST /v1/rpc`, and Dapr's
 * lock API over HTTP and gRPC. Each is the same server process on the embedded backend (in
 * memory) as `dlm-embedded-memory`, driven the way such clients drive it: a keep-alive HTTP
 * agent posting JSON-RPC, and the official Dapr SDK (`@dapr/dapr`) in each of its modes.
 */
export type Door = 'rpc' | 'dapr-http' | 'dapr-grpc';

/** The Dapr store the doors' server maps to the whole name space. */
const STORE = 'bench';

/** A JSON-RPC reply, as far as the benchmark reads it. */
interface RpcReply {
  result?: { token: string; leaseKey: string };
  error?: { message: string; data?: { code?: string } };
}

/** One POST of JSON on a kept-alive connection; the reply parsed. */
function postJson(agent: Agent, url: URL, body: unknown): Promise<RpcReply> {
  const text = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const call = request(
      {
        agent,
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          try {
            resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
          } catch (error) {
            reject(error);
          }
        });
      },
    );
    call.on('error', reject);
    call.end(text);
  });
}

/** One simulated HTTP client: its own connection (a keep-alive agent of one socket). */
export function rpcLocker(httpUrl: string): Locker {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const url = new URL('/v1/rpc', httpUrl);
  let id = 0;
  const call = async (method: string, params: object) => {
    id += 1;
    const reply = await postJson(agent, url, { jsonrpc: '2.0', id, method, params });
    if (reply.error) {
      if (reply.error.data?.code === 'LOCK_HELD') throw new WaitTimeout(String(params));
      throw new Error(`${method}: ${reply.error.message}`);
    }
    return reply.result as NonNullable<RpcReply['result']>;
  };
  return {
    async acquire(name, { ttlMs, waitMs, mode, limit }) {
      const grant = await call('lock.acquire', {
        name,
        ttlMs,
        waitMs,
        ...(mode === undefined ? {} : { mode }),
        ...(limit === undefined ? {} : { limit }),
      });
      return {
        async release() {
          await call('lock.release', { name, token: grant.token, leaseKey: grant.leaseKey });
        },
      };
    },
    async close() {
      agent.destroy();
    },
  };
}

let owners = 0;

/** One simulated Dapr app: a `DaprClient` of its own. Dapr's TryLock does not wait. */
export async function daprLocker(protocol: 'http' | 'grpc', port: number): Promise<Locker> {
  const client = new DaprClient({
    daprHost: '127.0.0.1',
    daprPort: String(port),
    communicationProtocol:
      protocol === 'http' ? CommunicationProtocolEnum.HTTP : CommunicationProtocolEnum.GRPC,
    logger: { level: LogLevel.Error },
  });
  await client.start();
  return {
    async acquire(name, { ttlMs }) {
      owners += 1;
      const owner = `bench-${process.pid}-${owners}`;
      const seconds = Math.max(1, Math.ceil(ttlMs / 1000));
      const { success } = await client.lock.lock(STORE, name, owner, seconds);
      if (!success) throw new WaitTimeout(name);
      return {
        async release() {
          const { status } = await client.lock.unlock(STORE, name, owner);
          if (status !== 0) throw new Error(`unlock ${name}: status ${status}`);
        },
      };
    },
    close: () => client.stop(),
  };
}

/** A dlm server process (embedded, in memory) with Dapr's API on, reached through `door`. */
export function doorTarget(id: string, label: string, door: Door): Target {
  return {
    id,
    label,
    kind: 'dlm',
    // Dapr's calls do not wait, and the lock space is one: workload 1 compares the doors.
    onlyWorkloads: ['uncontended'],
    async start(): Promise<RunningTarget> {
      const grpcPort = await freePort();
      const server = await startServerProcess({
        backendArgs: [
          '--backend',
          'embedded',
          '--memory',
          '--dapr-stores',
          `${STORE}=`,
          '--dapr-grpc-port',
          String(grpcPort),
        ],
      });
      const httpUrl = server.url.replace(/^ws/, 'http').replace(/\/v1\/ws$/, '');
      const port = Number(new URL(httpUrl).port);
      return {
        serverPid: server.pid,
        connect: async () =>
          door === 'rpc'
            ? rpcLocker(httpUrl)
            : daprLocker(
                door === 'dapr-http' ? 'http' : 'grpc',
                door === 'dapr-http' ? port : grpcPort,
              ),
        stop: () => server.stop(),
      };
    },
  };
}
