import { MAX_PAYLOAD_BYTES } from '@dlm/protocol';
import {
  Metadata,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServiceDefinition,
  type sendUnaryData,
  status,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { DAPR_TOKEN_HEADER, daprMetadata, FENCING_TOKEN_HEADER } from './dapr-http.js';
import { DaprError, type DaprLocks, type DaprOptions } from './dapr-locks.js';
import {
  decodeEmpty,
  decodeLockRequest,
  encodeMetadataResponse,
  encodeTryLockResponse,
  encodeUnlockResponse,
} from './dapr-proto.js';
import type { DoorContext } from './door.js';
import { ANONYMOUS, type Principal } from './permissions.js';

/** Dapr's runtime service; the door implements three of its methods, the rest are UNIMPLEMENTED. */
const SERVICE = 'dapr.proto.runtime.v1.Dapr';

const identity = (buffer: Buffer) => buffer;

function method<Request>(
  name: string,
  decode: (buffer: Buffer) => Request,
): ServiceDefinition[string] {
  return {
    path: `/${SERVICE}/${name}`,
    requestStream: false,
    responseStream: false,
    requestDeserialize: decode,
    requestSerialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
    originalName: name,
  };
}

const DEFINITION: ServiceDefinition = {
  TryLockAlpha1: method('TryLockAlpha1', decodeLockRequest),
  UnlockAlpha1: method('UnlockAlpha1', decodeLockRequest),
  GetMetadata: method('GetMetadata', decodeEmpty),
};

type Call = ServerUnaryCall<ReturnType<typeof decodeLockRequest>, Buffer>;

/** The principal of a call's `dapr-api-token`, or the error Dapr answers without a valid one. */
function principalOf(context: DoorContext, metadata: Metadata): Principal | DaprError {
  if (!context.authenticator.required) return ANONYMOUS;
  const token = metadata.get(DAPR_TOKEN_HEADER)[0];
  if (token === undefined) {
    return new DaprError(
      'ERR_API_TOKEN',
      'missing api token in request metadata',
      401,
      status.UNAUTHENTICATED,
    );
  }
  const principal = context.authenticator.verify(String(token));
  if (principal) return principal;
  context.logger.warn('authentication failed', { door: 'dapr-grpc' });
  return new DaprError(
    'ERR_API_TOKEN',
    'authentication error: api token mismatch',
    401,
    status.UNAUTHENTICATED,
  );
}

/** The client's address without its port (`[::1]:5000` → `::1`), for the per-address limits. */
function addressOf(peer: string): string {
  const bare = peer.replace(/^ipv[46]:/, '');
  const colon = bare.lastIndexOf(':');
  return (colon < 0 ? bare : bare.slice(0, colon)).replace(/^\[|\]$/g, '');
}

function failWith(callback: sendUnaryData<Buffer>, error: unknown): void {
  const dapr =
    error instanceof DaprError
      ? error
      : new DaprError('ERR_INTERNAL', 'internal error', 500, status.INTERNAL);
  callback({ code: dapr.grpcCode, details: dapr.message });
}

/**
 * Runs `serve` for an authenticated, admitted call: Dapr's UNAUTHENTICATED without a valid token
 * (when the server has tokens), RESOURCE_EXHAUSTED past the per-address limits.
 */
function guarded(
  context: DoorContext,
  serve: (principal: Principal, call: Call, callback: sendUnaryData<Buffer>) => Promise<void>,
) {
  return (call: Call, callback: sendUnaryData<Buffer>): void => {
    const principal = principalOf(context, call.metadata);
    if (principal instanceof DaprError) {
      failWith(callback, principal);
      return;
    }
    const admitted = context.addresses.admit(addressOf(call.getPeer()));
    if (typeof admitted !== 'function') {
      callback({ code: status.RESOURCE_EXHAUSTED, details: admitted.message });
      return;
    }
    serve(principal, call, callback)
      .catch((error: unknown) => failWith(callback, error))
      .finally(admitted);
  };
}

function implementation(
  context: DoorContext,
  options: DaprOptions,
  locks: DaprLocks,
): UntypedServiceImplementation {
  return {
    TryLockAlpha1: guarded(context, async (principal, call, callback) => {
      const outcome = await locks.tryLock(principal, call.request);
      const trailer = new Metadata();
      if (outcome.success) trailer.set(FENCING_TOKEN_HEADER, outcome.token);
      callback(null, encodeTryLockResponse(outcome), trailer);
    }),
    UnlockAlpha1: guarded(context, async (principal, call, callback) => {
      const unlocked = await locks.unlock(principal, call.request);
      callback(null, encodeUnlockResponse({ status: unlocked }));
    }),
    GetMetadata: guarded(context, async (_principal, _call, callback) => {
      callback(null, encodeMetadataResponse(daprMetadata(options, context.serverVersion)));
    }),
  };
}

export interface DaprGrpcDoor {
  readonly port: number;
  close(): Promise<void>;
}

/**
 * Dapr's gRPC API (`dapr.proto.runtime.v1.Dapr`) on a port of its own: `TryLockAlpha1`,
 * `UnlockAlpha1` and `GetMetadata`, with Dapr's messages and status codes; every other method of
 * the service answers UNIMPLEMENTED. The fencing token of a successful TryLock travels in the
 * `dlm-fencing-token` trailer. TLS when the server has it.
 */
export async function startDaprGrpc(
  context: DoorContext,
  options: DaprOptions,
  locks: DaprLocks,
  where: { host: string; port: number; tls?: { cert: string | Buffer; key: string | Buffer } },
): Promise<DaprGrpcDoor> {
  const server = new Server({
    'grpc.max_receive_message_length': MAX_PAYLOAD_BYTES,
  });
  server.addService(DEFINITION, implementation(context, options, locks));
  const credentials = where.tls
    ? ServerCredentials.createSsl(
        null,
        [{ cert_chain: Buffer.from(where.tls.cert), private_key: Buffer.from(where.tls.key) }],
        false,
      )
    : ServerCredentials.createInsecure();
  const host = where.host.includes(':') ? `[${where.host}]` : where.host;
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${host}:${where.port}`, credentials, (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        // Calls in flight get a second to finish (the service has cancelled its waits by now).
        const force = setTimeout(() => server.forceShutdown(), 1_000);
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      }),
  };
}
