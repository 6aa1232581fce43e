#!/usr/bin/env node
// Writes one tarball per published package (every workspace package.json without "private")
// into DIR (default: tarballs/ at the repo root), with `pnpm pack`, which rewrites `workspace:`
// ranges to the versions they point at. Expects the packages built (`pnpm release:pack` builds
// first). Prints the tarballs' paths, one per line.
//
//   node tooling/release/pack.mjs [--out DIR]
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const root = resolve(import.meta.dirname, '..', '..');
const { values } = parseArgs({ options: { out: { type: 'string' } } });
const out = resolve(values.out ?? join(root, 'tarballs'));

/** The workspace's package directories, from the globs in pnpm-workspace.yaml (`dir/*` only). */
function workspaceDirs() {
  const yaml = readFileSync(join(root, 'pnpm-workspace.yaml'), 'utf8');
  const globs = [...yaml.matchAll(/^\s*-\s*["']?([^"'\s]+)\/\*["']?\s*$/gm)].map((m) => m[1]);
  return globs.flatMap((dir) =>
    readdirSync(join(root, dir), { withFileTypes: true })
      .filter(
        (entry) => entry.isDirectory() && existsSync(join(root, dir, entry.name, 'package.json')),
      )
      .map((entry) => join(root, dir, entry.name)),
  );
}

const published = workspaceDirs()
  .map((dir) => ({ dir, manifest: JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) }))
  .filter(({ manifest }) => manifest.private !== true);

for (const { dir, manifest } of published) {
  const main = manifest.exports?.['.']?.default ?? manifest.bin?.[Object.keys(manifest.bin)[0]];
  if (main && !existsSync(join(dir, main))) {
    console.error(`${manifest.name}: ${main} is missing: build first (pnpm release:pack builds)`);
    process.exit(1);
  }
}

/** pnpm's output is kept, and shown (on stderr) only if it fails: a file list per package. */
const QUIET = {
  cwd: root,
  stdio: ['ignore', 'pipe', 'pipe'],
  encoding: 'utf8',
  maxBuffer: 2 ** 26,
};

/** pnpm itself when a pnpm script runs this, else the version the repo pins, through npx. */
function pnpm(args) {
  const execPath = process.env.npm_execpath;
  if (execPath && /pnpm/.test(execPath)) {
    // pnpm 12 is a native executable; older ones are a script for node.
    const script = /\.[cm]?js$/.test(execPath);
    return spawnSync(script ? process.execPath : execPath, script ? [execPath, ...args] : args, {
      ...QUIET,
    });
  }
  const pinned = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).packageManager;
  return spawnSync('npx', ['-y', pinned, ...args], QUIET);
}

mkdirSync(out, { recursive: true });
for (const file of readdirSync(out)) if (file.endsWith('.tgz')) rmSync(join(out, file));
const filters = published.flatMap(({ manifest }) => ['--filter', manifest.name]);
// This script's stdout is the list of tarballs; pnpm's own words only when it fails.
const packed = pnpm([...filters, 'pack', '--pack-destination', out]);
if (packed.status !== 0) {
  process.stderr.write(`${packed.stdout ?? ''}${packed.stderr ?? ''}`);
  if (packed.error) console.error(`could not run pnpm: ${packed.error.message}`);
  process.exit(packed.status || 1);
}
const tarballs = readdirSync(out).filter((file) => file.endsWith('.tgz'));
if (tarballs.length !== published.length) {
  console.error(`expected ${published.length} tarballs in ${out}, found ${tarballs.length}`);
  process.exit(1);
}
for (const file of tarballs.sort()) console.log(join(out, file));
