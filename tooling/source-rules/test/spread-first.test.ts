import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { spreadFirstLiterals } from '../src/spread-first.js';

const root = resolve(import.meta.dirname, '../../..');

/**
 * The code a lock request runs through, in a user's process or in the server: the published
 * packages and the server. Not the protocol's schemas (built once, at load), nor the
 * conformance suite and the test services (tests).
 */
function sourceFiles(): string[] {
  const listed = execFileSync(
    'git',
    ['ls-files', '--', 'packages/*/src/*.ts', 'packages/*/src/**/*.ts', 'apps/server/src/*.ts'],
    { cwd: root, encoding: 'utf8' },
  );
  const elsewhere = ['packages/protocol/', 'packages/testing/'];
  return [...new Set(listed.split('\n'))].filter(
    (file) => file !== '' && !elsewhere.some((dir) => file.startsWith(dir)),
  );
}

describe('object literals that start with a spread', () => {
  it('none in the packages and the server: Object.assign({}, base, fields) instead', () => {
    const files = sourceFiles();
    expect(files.length).toBeGreaterThan(100);
    const found = files.flatMap((file) =>
      spreadFirstLiterals(file, readFileSync(resolve(root, file), 'utf8')),
    );
    expect(found.map(({ file, line, text }) => `${file}:${line} ${text}`)).toEqual([]);
  });

  it('the check finds one (negative control), and passes what V8 keeps on shared classes', () => {
    const planted = [
      'const a = { ...base, field: 1 };',
      'const b = { ...x, ...y };',
      'const c = { field: 1, ...rest };',
      'const d = { ...alone };',
      'const e = Object.assign({}, base, { field: 1 });',
      'const f = { g: { ...inner, h: 2 } };',
      'const perCall = { ...once, atLoad: false };',
    ]
      .map((line) => `function made() { ${line} }`)
      .concat('export const TABLE = { ...once, atLoad: true };')
      .join('\n');
    expect(spreadFirstLiterals('planted.ts', planted).map(({ line }) => line)).toEqual([
      1, 2, 6, 7,
    ]);
  });
});
