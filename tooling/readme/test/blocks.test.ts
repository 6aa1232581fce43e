import { describe, expect, it } from 'vitest';
import { codeBlocks } from '../src/blocks.js';

describe('codeBlocks', () => {
  it('reads each fence’s language, marker and code, indented fences included', () => {
    const markdown = [
      '# x',
      '```sh run',
      'echo one',
      '```',
      '- a list item:',
      '',
      '  ```ts sketch',
      '  const a = 1;',
      '  ```',
      '```',
      'no language',
      '```',
      '````md',
      '```js run',
      '````',
      '```sh run=serve',
      'npx -y pnpm@12.4.2 start',
      '```',
    ].join('\n');
    expect(codeBlocks('X.md', markdown)).toEqual([
      { file: 'X.md', line: 2, language: 'sh', words: ['run'], marker: 'run', code: 'echo one\n' },
      {
        file: 'X.md',
        line: 7,
        language: 'ts',
        words: ['sketch'],
        marker: 'sketch',
        code: 'const a = 1;\n',
      },
      { file: 'X.md', line: 10, language: '', words: [], marker: undefined, code: 'no language\n' },
      { file: 'X.md', line: 13, language: 'md', words: [], marker: undefined, code: '```js run\n' },
      {
        file: 'X.md',
        line: 16,
        language: 'sh',
        words: ['run=serve'],
        marker: 'run=serve',
        code: 'npx -y pnpm@12.4.2 start\n',
      },
    ]);
  });
});
