#!/usr/bin/env node
// Builds what a root script needs with turbo (PACKAGE and what it depends on, or everything),
// printing nothing unless the build fails: then turbo's whole output, and its exit status. So
// `pnpm dlm …` and `pnpm start` print only what the command itself prints.
//
//   node tooling/quiet-build.mjs [PACKAGE]
import { spawnSync } from 'node:child_process';
import { resolve } from 'node:path';

const root = resolve(import.meta.dirname, '..');
const [target] = process.argv.slice(2);
const args = ['run', 'build', '--output-logs=errors-only'];
if (target) args.push(`--filter=${target}...`);
const turbo = resolve(root, 'node_modules', '.bin', 'turbo');
const built = spawnSync(turbo, args, {
  cwd: root,
  env: { ...process.env, TURBO_TELEMETRY_DISABLED: '1' },
  stdio: ['ignore', 'pipe', 'pipe'],
  encoding: 'utf8',
  maxBuffer: 64 * 1024 * 1024,
});
if (built.error || built.status !== 0) {
  process.stderr.write(built.stdout ?? '');
  process.stderr.write(built.stderr ?? '');
  if (built.error) console.error(`could not run turbo: ${built.error.message}`);
  console.error(`the build failed (turbo ${args.join(' ')}); the command did not run`);
  process.exit(built.status || 1);
}
