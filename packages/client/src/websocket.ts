import NodeWebSocket from 'ws';

/**
 * The part of the WHATWG `WebSocket` interface the client uses. The browser's `WebSocket`,
 * the `ws` package and undici's `WebSocket` all provide it.
 */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  /** `ws` only: drops the TCP connection without the closing handshake. */
  terminate?(): void;
  addEventListener(type: 'open', listener: () => void): void;
  addEventListener(type: 'message', listener: (event: { data: unknown }) => void): void;
  addEventListener(
    type: 'close',
    listener: (event: { code: number; reason: string }) => void,
  ): void;
  addEventListener(
    type: 'error',
    listener: (event: { message?: string; error?: unknown }) => void,
  ): void;
}

/** A `WebSocket` constructor: `new WebSocket(url, protocols)`. */
export type WebSocketConstructor = new (
  url: string,
  protocols?: string | string[],
) => WebSocketLike;

/** `WebSocket.OPEN`. */
export const OPEN = 1;

/** TLS settings for `wss://` under Node: the CA(s) that issued the server's certificate. */
export interface TlsOptions {
  ca?: string | Buffer | Array<string | Buffer>;
}

/**
 * The constructor to use when the caller passes none: `ws` under Node (the one this package is
 * tested with, and Node 20 has no global `WebSocket`), the global one elsewhere. Under a
 * bundler for browsers `ws` resolves to a stub that is never called, because a global exists.
 * `tls` reaches `ws` under Node; a browser uses its own trust store.
 */
export function defaultWebSocket(tls?: TlsOptions): WebSocketConstructor {
  const isNode = typeof process !== 'undefined' && typeof process.versions?.node === 'string';
  const global = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (!isNode && global) return global;
  if (tls) {
    const WithTls = class extends NodeWebSocket {
      constructor(url: string, protocols?: string | string[]) {
        super(url, protocols, { ...tls });
      }
    };
    return WithTls as unknown as WebSocketConstructor;
  }
  // ws's overloaded, generic listener signatures do not line up with the structural interface
  // above, though its runtime behaviour does (it implements the WHATWG event API).
  return NodeWebSocket as unknown as WebSocketConstructor;
}
