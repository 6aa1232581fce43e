import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { documentedFiles, relativeLinks } from '../src/blocks.js';

const root = resolve(import.meta.dirname, '..', '..', '..');

describe('the links of every README', () => {
  it('that are relative point at a file inside the repo (a clone has nothing beside it)', () => {
    const broken = documentedFiles(root).flatMap((file) =>
      relativeLinks(file, readFileSync(join(root, file), 'utf8'))
        .filter((link) => {
          const path = resolve(
            dirname(join(root, file)),
            decodeURIComponent(link.target.split('#')[0] ?? ''),
          );
          return relative(root, path).startsWith('..') || !existsSync(path);
        })
        .map((link) => `${link.file}:${link.line} → ${link.target}`),
    );
    expect(broken).toEqual([]);
  });

  it('are found in prose, not in code', () => {
    const markdown = [
      'see [a](../../outside.md) and `[b](code.md)`',
      '```',
      '[c](in-code.md)',
      '```',
    ].join('\n');
    expect(relativeLinks('X.md', markdown)).toEqual([
      { file: 'X.md', line: 1, target: '../../outside.md' },
    ]);
  });
});
