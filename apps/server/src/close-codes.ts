/**
 * The WebSocket close codes the server ends a connection with. The application codes are
 * 4000 + (the protocol error number − 1000), so 4004 goes with UNAUTHENTICATED (1004), 4006 with
 * LIMIT_EXCEEDED (1006) and 4008 with HELLO_REQUIRED (1008). A dead or non-reading peer is
 * dropped without a closing handshake (its side reports 1006).
 */
export const CLOSE = {
  /** The server is shutting down. */
  GOING_AWAY: 1001,
  /** A frame larger than the payload limit (sent by `ws` itself). */
  MESSAGE_TOO_BIG: 1009,
  /** `session.hello` without valid credentials, after its UNAUTHENTICATED reply. */
  UNAUTHENTICATED: 4004,
  /** The connection kept sending far above its message rate. */
  LIMIT_EXCEEDED: 4006,
  /** No successful `session.hello` within `helloTimeoutMs` of the upgrade. */
  HELLO_TIMEOUT: 4008,
} as const;
