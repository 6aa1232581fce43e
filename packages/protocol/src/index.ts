export { messageSchemaFiles, protocolAsyncApi } from './asyncapi.js';
export { conforms } from './conforms.js';
export {
  CLOSE_TOO_BIG,
  MAX_PAYLOAD_BYTES,
  OPENAPI_PATH,
  PROTOCOL,
  RPC_PATH,
  SUBPROTOCOL,
  WS_PATH,
} from './constants.js';
export { fromRpcError, toRpcError } from './errors.js';
export { type ProtocolMessage, protocolMessages } from './frames.js';
export { httpMethods, isHttpMethod } from './http.js';
export { protocolJsonSchema } from './json-schema.js';
export { packFrames, utf8Length } from './multi-frames.js';
export { protocolOpenApi } from './openapi.js';
export {
  FRAMES_MULTI,
  type MethodName,
  Methods,
  type NotificationName,
  type NotificationParams,
  Notifications,
  type ParamsOf,
  type ResultOf,
  type RpcErrorObject,
  type RpcRequestId,
} from './schemas.js';
export {
  formatTraceparent,
  parseTraceparent,
  TRACEPARENT_PATTERN,
  type TraceParent,
} from './traceparent.js';
