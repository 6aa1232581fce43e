/**
 * The few messages of Dapr's `dapr.proto.runtime.v1` the gRPC door speaks, in protobuf's wire
 * format, with Dapr's field numbers (dapr/proto/runtime/v1/lock.proto and metadata.proto):
 *
 *   TryLockRequest   { string store_name = 1; string resource_id = 2; string lock_owner = 3;
 *                      int32 expiry_in_seconds = 4; }
 *   TryLockResponse  { bool success = 1; }
 *   UnlockRequest    { string store_name = 1; string resource_id = 2; string lock_owner = 3; }
 *   UnlockResponse   { Status status = 1; }   // SUCCESS 0, LOCK_DOES_NOT_EXIST 1, ...
 *   GetMetadataRequest {}
 *   GetMetadataResponse { string id = 1; repeated RegisteredComponents registered_components = 3;
 *                         string runtime_version = 8; }
 *   RegisteredComponents { string name = 1; string type = 2; string version = 3;
 *                          repeated string capabilities = 4; }
 *
 * Six flat messages do not need a protobuf library: a reader that skips what it does not know
 * (as protobuf readers must) and a writer of strings, varints and nested messages.
 */

const VARINT = 0;
const FIXED64 = 1;
const BYTES = 2;
const FIXED32 = 5;

/** A message that is not valid protobuf (grpc-js answers INTERNAL, as Go's gRPC does). */
export class ProtoError extends Error {}

/** Each field's last value (proto3: a repeated scalar keeps the last), by field number. */
type Fields = Map<number, bigint | Buffer>;

function readVarint(buffer: Buffer, at: { offset: number }): bigint {
  let value = 0n;
  for (let shift = 0n; shift < 70n; shift += 7n) {
    if (at.offset >= buffer.length) throw new ProtoError('truncated varint');
    const byte = buffer[at.offset++]!;
    value |= BigInt(byte & 0x7f) << shift;
    if ((byte & 0x80) === 0) return value;
  }
  throw new ProtoError('varint over 10 bytes');
}

function readFields(buffer: Buffer): Fields {
  const fields: Fields = new Map();
  const at = { offset: 0 };
  while (at.offset < buffer.length) {
    const tag = readVarint(buffer, at);
    const number = Number(tag >> 3n);
    const wire = Number(tag & 7n);
    if (number === 0) throw new ProtoError('field number 0');
    if (wire === VARINT) {
      fields.set(number, readVarint(buffer, at));
    } else if (wire === BYTES) {
      const length = Number(readVarint(buffer, at));
      if (at.offset + length > buffer.length) throw new ProtoError('truncated field');
      fields.set(number, buffer.subarray(at.offset, at.offset + length));
      at.offset += length;
    } else if (wire === FIXED64 || wire === FIXED32) {
      at.offset += wire === FIXED64 ? 8 : 4;
      if (at.offset > buffer.length) throw new ProtoError('truncated field');
    } else {
      throw new ProtoError(`wire type ${wire}`);
    }
  }
  return fields;
}

function stringOf(fields: Fields, number: number): string {
  const value = fields.get(number);
  if (value === undefined) return '';
  if (!Buffer.isBuffer(value)) throw new ProtoError(`field ${number} is not a string`);
  return value.toString('utf8');
}

function int32Of(fields: Fields, number: number): number {
  const value = fields.get(number);
  if (value === undefined) return 0;
  if (Buffer.isBuffer(value)) throw new ProtoError(`field ${number} is not an integer`);
  // int32 travels as a varint; a negative one sign-extended to 64 bits.
  return Number(BigInt.asIntN(32, value));
}

/** A TryLockRequest (without `expiryInSeconds`: an UnlockRequest). */
export function decodeLockRequest(buffer: Buffer) {
  const fields = readFields(buffer);
  return {
    storeName: stringOf(fields, 1),
    resourceId: stringOf(fields, 2),
    lockOwner: stringOf(fields, 3),
    expiryInSeconds: int32Of(fields, 4),
  };
}

/** GetMetadataRequest has no fields; it must still be valid protobuf. */
export function decodeEmpty(buffer: Buffer): Record<string, never> {
  readFields(buffer);
  return {};
}

function varint(value: number): Buffer {
  const bytes: number[] = [];
  let rest = value;
  while (rest > 0x7f) {
    bytes.push((rest & 0x7f) | 0x80);
    rest = Math.floor(rest / 128);
  }
  bytes.push(rest);
  return Buffer.from(bytes);
}

function varintField(number: number, value: number): Buffer {
  // proto3 leaves a field at its default (0, false) out.
  return value === 0 ? Buffer.alloc(0) : Buffer.concat([varint(number << 3), varint(value)]);
}

function bytesField(number: number, value: Buffer): Buffer {
  return Buffer.concat([varint((number << 3) | BYTES), varint(value.length), value]);
}

const stringField = (number: number, value: string) =>
  value === '' ? Buffer.alloc(0) : bytesField(number, Buffer.from(value, 'utf8'));

export function encodeTryLockResponse(response: { success: boolean }): Buffer {
  return varintField(1, response.success ? 1 : 0);
}

export function encodeUnlockResponse(response: { status: number }): Buffer {
  return varintField(1, response.status);
}

export interface MetadataMessage {
  id: string;
  runtimeVersion: string;
  components: Array<{ name: string; type: string; version: string; capabilities: string[] }>;
}

export function encodeMetadataResponse(metadata: MetadataMessage): Buffer {
  return Buffer.concat([
    stringField(1, metadata.id),
    ...metadata.components.map((component) =>
      bytesField(
        3,
        Buffer.concat([
          stringField(1, component.name),
          stringField(2, component.type),
          stringField(3, component.version),
          ...component.capabilities.map((capability) => stringField(4, capability)),
        ]),
      ),
    ),
    stringField(8, metadata.runtimeVersion),
  ]);
}
