import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { tempDir } from '@dlm/test-services';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..', '..');
const pinned = 'pnpm@12.4.2';

/** A root script as the README runs it (`npx -y pnpm@12.4.2 …`), from the repo's root. */
function pnpm(...args: string[]) {
  return spawnSync('npx', ['-y', pinned, ...args], { cwd: root, encoding: 'utf8' });
}

/** What is left of stderr without pnpm's own `$ script` line. */
function beyondEcho(stderr: string): string[] {
  return stderr.split('\n').filter((line) => line.trim() !== '' && !line.startsWith('$ '));
}

// `pnpm dlm …` once printed turbo's build summary (its version, the packages in scope, the
// tasks and the cache) before every command's output, and `release:pack` 844 lines of pnpm's
// file lists: the builds and the packing say nothing unless they fail.
describe('the root scripts are quiet unless something fails', () => {
  it('pnpm dlm prints only what the command prints', () => {
    const run = pnpm('dlm', '--version');
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    expect(beyondEcho(run.stderr)).toEqual([]);
  });

  it('a failing build shows turbo’s output, and the command does not run', () => {
    const run = pnpm('exec', 'node', 'tooling/quiet-build.mjs', '@dlm/no-such-package');
    expect(run.status).not.toBe(0);
    expect(run.stderr).toMatch(/no-such-package/);
    expect(run.stderr).toMatch(/the build failed/);
  });

  it('release:pack prints the tarballs and nothing else', () => {
    const out = tempDir('quiet-pack');
    const run = pnpm('release:pack', '--out', out);
    expect(run.status, run.stderr).toBe(0);
    const lines = run.stdout.trim().split('\n');
    expect(lines.length).toBeGreaterThan(5);
    for (const line of lines) expect(line).toMatch(new RegExp(`^${out}/.+\\.tgz$`));
    expect(beyondEcho(run.stderr)).toEqual([]);
  });
});
