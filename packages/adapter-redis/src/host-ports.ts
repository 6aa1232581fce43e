import { DlmError } from '@dlm/core';

/** A Redis node or sentinel by host and port. */
export interface HostPort {
  host: string;
  port: number;
}

/**
 * `host:port` items (`[::1]:7000` too), or addresses, as addresses: at least one, each with a
 * host and a port from 1 to 65535; INVALID_PARAMS naming `field` otherwise.
 */
export function parseHostPorts(items: ReadonlyArray<string | HostPort>, field: string): HostPort[] {
  if (items.length === 0) {
    throw new DlmError('INVALID_PARAMS', `${field}: give at least one host:port`, { field });
  }
  return items.map((item) => {
    const address = typeof item === 'string' ? fromText(item) : item;
    if (
      address === undefined ||
      !address.host ||
      !Number.isInteger(address.port) ||
      address.port < 1 ||
      address.port > 65_535
    ) {
      throw new DlmError(
        'INVALID_PARAMS',
        `${field}: expected host:port with a port from 1 to 65535, got ${JSON.stringify(item)}`,
        { field },
      );
    }
    return { host: address.host, port: address.port };
  });
}

function fromText(text: string): HostPort | undefined {
  const match = /^\[?([^\]\s]+?)\]?:(\d{1,5})$/.exec(text.trim());
  return match ? { host: match[1]!, port: Number(match[2]) } : undefined;
}
