/** The protocol name `session.hello` reports. */
export const PROTOCOL = 'dlm.v1';
/** The WebSocket subprotocol a client offers (`Sec-WebSocket-Protocol`). */
export const SUBPROTOCOL = 'dlm.v1.json';
/** The WebSocket endpoint path. */
export const WS_PATH = '/v1/ws';
/** Frames larger than this close the connection with code 1009. */
export const MAX_PAYLOAD_BYTES = 64 * 1024;
/** WebSocket close code for an oversize frame. */
export const CLOSE_TOO_BIG = 1009;
/**
 * The HTTP door (extension): one JSON-RPC request per `POST`, for the methods of `HTTP_METHODS`.
 */
export const RPC_PATH = '/v1/rpc';
/** Where a server serves the OpenAPI 3.1 document of `RPC_PATH`. */
export const OPENAPI_PATH = '/v1/openapi.json';
