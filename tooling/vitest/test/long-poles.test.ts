import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LONG_POLES, longPolesFirst } from '../long-poles-first.ts';

const root = resolve(import.meta.dirname, '../../..');

describe('longPolesFirst', () => {
  it('names only files that exist', () => {
    const missing = Object.keys(LONG_POLES).filter((path) => !existsSync(resolve(root, path)));
    expect(missing).toEqual([]);
  });

  it('starts the long poles first, longest first, and keeps the order of the rest', () => {
    const paths = [
      'packages/core/test/b.test.ts',
      'packages/adapter-postgres/test/conformance.test.ts',
      'packages/core/test/a.test.ts',
      'apps/cli/test/lock.test.ts',
    ];
    const sorted = longPolesFirst(
      paths.map((path) => ({ moduleId: resolve(root, path) })),
      root,
    );
    expect(sorted.map((file) => file.moduleId.slice(root.length + 1))).toEqual([
      'packages/adapter-postgres/test/conformance.test.ts',
      'apps/cli/test/lock.test.ts',
      'packages/core/test/b.test.ts',
      'packages/core/test/a.test.ts',
    ]);
  });
});
