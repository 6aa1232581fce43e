import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..');

/**
 * The harness starts its workers, resource and server as plain-JS child processes from
 * `dist/`. CI builds everything first; locally, rebuild when a source is newer than its output.
 */
export function ensureBuilt(): void {
  const src = join(ROOT, 'src');
  const stale = readdirSync(src)
    .filter((file) => file.endsWith('.ts'))
    .some((file) => {
      const built = join(ROOT, 'dist', file.replace(/\.ts$/, '.js'));
      return !existsSync(built) || statSync(built).mtimeMs < statSync(join(src, file)).mtimeMs;
    });
  if (!stale) return;
  try {
    execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'pipe' });
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: Buffer; stderr?: Buffer };
    throw new Error(`building @dlm/faults failed:\n${stdout ?? ''}${stderr ?? ''}`);
  }
}
