import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { documentedFiles, headingAnchors, relativeLinks } from '../src/blocks.js';

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

  it('that name a heading of a Markdown file (file.md#heading) find it there', () => {
    const broken = documentedFiles(root).flatMap((file) =>
      relativeLinks(file, readFileSync(join(root, file), 'utf8'))
        .filter((link) => {
          const [path = '', anchor] = link.target.split('#');
          if (anchor === undefined || !path.endsWith('.md')) return false;
          const target = resolve(dirname(join(root, file)), decodeURIComponent(path));
          if (!existsSync(target)) return false; // the test above reports it
          return !headingAnchors(readFileSync(target, 'utf8')).has(decodeURIComponent(anchor));
        })
        .map((link) => `${link.file}:${link.line} → ${link.target}`),
    );
    expect(broken).toEqual([]);
  });

  it("gives headings GitHub's anchors, and none to a heading inside a code block", () => {
    const markdown = [
      '## Semaphores and read-write locks',
      '### `lock.acquire` (v1)',
      '## [The spec](SPEC.md): modes',
      '## Notes',
      '## Notes',
      '```',
      '# not a heading',
      '```',
    ].join('\n');
    expect([...headingAnchors(markdown)]).toEqual([
      'semaphores-and-read-write-locks',
      'lockacquire-v1',
      'the-spec-modes',
      'notes',
      'notes-1',
    ]);
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
