import { describe, expect, it } from 'vitest';
import { allocationSites } from '../src/heap-sampler.js';

const node = (
  functionName: string,
  url: string,
  lineNumber: number,
  selfSize: number,
  children = [],
) => ({
  callFrame: { functionName, url, lineNumber },
  selfSize,
  children,
});

describe('allocationSites', () => {
  it('sums the sampled bytes per function and line over the whole tree, largest first', () => {
    const root = {
      ...node('(root)', '', 0, 0),
      children: [
        {
          ...node('call', 'file:///w/packages/client/dist/connection.js', 271, 100),
          children: [node('', 'file:///w/node_modules/ws/lib/sender.js', 9, 30)],
        },
        node('call', 'file:///w/packages/client/dist/connection.js', 271, 50),
        node('serve', 'file:///w/apps/server/dist/session.js', 140, 120),
      ],
    };
    expect(allocationSites(root as never)).toEqual([
      ['call packages/client/dist/connection.js:272', 150],
      ['serve apps/server/dist/session.js:141', 120],
      ['(anonymous) node_modules/ws/lib/sender.js:10', 30],
      ['(root) :1', 0],
    ]);
  });
});
