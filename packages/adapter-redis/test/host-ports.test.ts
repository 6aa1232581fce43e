import { describe, expect, it } from 'vitest';
import { parseHostPorts } from '../src/host-ports.js';

describe('parseHostPorts (Cluster nodes and sentinels alike)', () => {
  it('reads host:port, [IPv6]:port and addresses', () => {
    expect(
      parseHostPorts(['127.0.0.1:7000', ' [::1]:26379 ', { host: 'h', port: 1 }], 'nodes'),
    ).toEqual([
      { host: '127.0.0.1', port: 7000 },
      { host: '::1', port: 26379 },
      { host: 'h', port: 1 },
    ]);
  });

  it('refuses none, a missing or bad port and an empty host, naming the field and the item', () => {
    expect(() => parseHostPorts([], 'sentinels')).toThrow(
      expect.objectContaining({ code: 'INVALID_PARAMS', details: { field: 'sentinels' } }),
    );
    for (const bad of ['127.0.0.1', 'h:0', 'h:65536', ':7000', 'h:7x', { host: '', port: 1 }]) {
      expect(() => parseHostPorts([bad], 'nodes')).toThrow(
        expect.objectContaining({
          code: 'INVALID_PARAMS',
          details: { field: 'nodes' },
          message: `nodes: expected host:port with a port from 1 to 65535, got ${JSON.stringify(bad)}`,
        }),
      );
    }
  });
});
