import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import {
  freePort,
  type ManagedProcess,
  portOpen,
  type RedisService,
  redisAvailable,
  startProcess,
  startRedis,
  tempDir,
} from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * The install path a user outside the repo takes: `pnpm release:pack`'s tarballs, installed
 * with npm into a scratch project in the OS temp dir (no workspace, no pnpm links), used the
 * way the READMEs say. Third-party dependencies come from the npm registry; every `@dlm/*`
 * package comes from its tarball (npm `overrides`, so nothing of that scope is ever fetched).
 * Needs the packages built (`pnpm test` builds first). Never skipped for want of the network:
 * an install that cannot reach the registry fails.
 */

const root = resolve(import.meta.dirname, '..', '..', '..');
const packScript = join(root, 'tooling', 'release', 'pack.mjs');
/** Runs dlm's own processes on Node, not whatever the shell has first. */
const node = process.execPath;

// The Redis half needs a redis-server (local binary, Docker or the user's own); with CI=true
// a missing one fails the run instead of skipping.
const withRedis = redisAvailable();

let tarballDir = '';
/** `@dlm/name` → its tarball. */
const tarballs = new Map<string, string>();

/** The environment npm runs in: none of the pnpm/npm settings of the process that runs vitest. */
function npmEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^npm_/i.test(key)) env[key] = value;
  }
  return {
    ...env,
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
  };
}

/**
 * A scratch project depending on `names`, every `@dlm/*` package pinned to its tarball, then
 * `npm install`. Returns its directory.
 */
function install(prefix: string, names: string[]): string {
  const dir = tempDir(prefix);
  const overrides = Object.fromEntries([...tarballs].map(([name, file]) => [name, `file:${file}`]));
  const dependencies = Object.fromEntries(names.map((name) => [name, overrides[name]]));
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({
      name: `scratch-${prefix}`,
      private: true,
      type: 'module',
      dependencies,
      overrides,
    }),
  );
  const done = spawnSync('npm', ['install', '--no-audit', '--no-fund'], {
    cwd: dir,
    env: npmEnv(),
    encoding: 'utf8',
    timeout: 200_000,
  });
  if (done.status !== 0) {
    throw new Error(
      `npm install ${names.join(' ')} failed (${done.status}):\n${done.stdout}\n${done.stderr}`,
    );
  }
  return dir;
}

/** Every installed package (a directory with a package.json) under node_modules. */
function installedPackages(dir: string): string[] {
  const found: string[] = [];
  const walk = (modules: string) => {
    if (!existsSync(modules)) return;
    for (const entry of readdirSync(modules)) {
      if (entry.startsWith('.')) continue;
      const path = join(modules, entry);
      if (entry.startsWith('@')) {
        for (const scoped of readdirSync(path)) visit(join(path, scoped), `${entry}/${scoped}`);
      } else {
        visit(path, entry);
      }
    }
  };
  const visit = (path: string, name: string) => {
    if (!existsSync(join(path, 'package.json'))) return;
    found.push(name);
    walk(join(path, 'node_modules'));
  };
  walk(join(dir, 'node_modules'));
  return found;
}

function sizeOf(path: string): number {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.size;
  return readdirSync(path).reduce((sum, entry) => sum + sizeOf(join(path, entry)), 0);
}

function tarList(file: string): string[] {
  return execFileSync('tar', ['-tzf', file], { encoding: 'utf8' }).trim().split('\n');
}

function tarRead(file: string, member: string): string {
  return execFileSync('tar', ['-xzOf', file, member], { encoding: 'utf8', maxBuffer: 64 << 20 });
}

beforeAll(() => {
  tarballDir = tempDir('tarballs');
  const packed = spawnSync(node, [packScript, '--out', tarballDir], { encoding: 'utf8' });
  if (packed.status !== 0) throw new Error(`pack.mjs failed:\n${packed.stderr}`);
  for (const file of packed.stdout.trim().split('\n')) {
    const manifest = JSON.parse(tarRead(file, 'package/package.json')) as { name: string };
    tarballs.set(manifest.name, file);
  }
});

describe('the tarballs of pnpm release:pack', () => {
  it('are all of the version the README documents, each with its CHANGELOG entry', () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const documented = /documents dlm \*\*(\d+\.\d+\.\d+)\*\*/.exec(readme)?.[1];
    expect(documented, 'README.md: "documents dlm **X.Y.Z**"').toBeDefined();
    expect(tarballs.size).toBeGreaterThan(0);
    for (const [name, file] of tarballs) {
      const manifest = JSON.parse(tarRead(file, 'package/package.json')) as { version: string };
      expect(manifest.version, name).toBe(documented);
      expect(file.endsWith(`-${documented}.tgz`), file).toBe(true);
      expect(tarRead(file, 'package/CHANGELOG.md'), name).toContain(`## ${documented}`);
    }
  });

  it('are one per published package, with versions for workspace ranges, a LICENSE, engines and usable source maps', () => {
    const published = [
      'core',
      'protocol',
      'client',
      'server',
      'cli',
      'conformance',
      'transcripts',
      'flags',
    ].concat(
      ['embedded', 'redis', 'redlock', 'etcd', 'zookeeper', 'postgres'].map(
        (kind) => `adapter-${kind}`,
      ),
    );
    expect([...tarballs.keys()].sort()).toEqual(published.map((name) => `@dlm/${name}`).sort());
    for (const [name, file] of tarballs) {
      const manifest = JSON.parse(tarRead(file, 'package/package.json')) as Record<string, unknown>;
      const ranges = ['dependencies', 'peerDependencies', 'optionalDependencies'].flatMap((field) =>
        Object.values((manifest[field] as Record<string, string> | undefined) ?? {}),
      );
      expect(
        ranges.filter((range) => range.startsWith('workspace:')),
        name,
      ).toEqual([]);
      expect(manifest.license, name).toBe('MIT');
      expect(manifest.engines, name).toEqual({ node: '>=20.19' });
      const files = tarList(file);
      expect(files, name).toContain('package/LICENSE');
      expect(tarRead(file, 'package/LICENSE'), name).toMatch(/^MIT License/);
      // A declaration map points at src/, which is not shipped: none are.
      expect(
        files.filter((path) => path.endsWith('.d.ts.map')),
        name,
      ).toEqual([]);
      const maps = files.filter((path) => path.endsWith('.js.map'));
      expect(maps.length, name).toBeGreaterThan(0);
      for (const map of maps) {
        const { sources, sourcesContent } = JSON.parse(tarRead(file, map)) as {
          sources: string[];
          sourcesContent?: string[];
        };
        expect(sourcesContent?.length, `${name} ${map}`).toBe(sources.length);
      }
    }
  });
});

describe.runIf(withRedis)('installed with npm outside the repo', () => {
  let redis: RedisService | undefined;
  let server: ManagedProcess | undefined;
  let serverUrl = '';

  afterAll(async () => {
    await server?.stop();
    await redis?.stop();
  });

  it('@dlm/client against a dlm-server from its tarball, and @dlm/core + @dlm/adapter-redis in process', async () => {
    const dir = install('app', ['@dlm/client', '@dlm/core', '@dlm/adapter-redis', '@dlm/server']);
    redis = await startRedis();
    const port = await freePort();
    server = await startProcess({
      name: 'dlm-server (npm install)',
      command: node,
      args: [
        join(dir, 'node_modules', '@dlm', 'server', 'dist', 'main.js'),
        '--memory',
        '--port',
        String(port),
      ],
      cwd: dir,
      ready: () => portOpen(port),
    });
    serverUrl = `ws://127.0.0.1:${port}/v1/ws`;
    writeFileSync(
      join(dir, 'use.mjs'),
      `import { createClient } from '@dlm/client';
import { createLockService } from '@dlm/core';
import { redisBackend } from '@dlm/adapter-redis';

const [url, redisUrl] = process.argv.slice(2);
const code = (promise) => promise.then(() => 'granted', (error) => error.code);

// (a) the client against a running server
const dlm = createClient({ url });
const first = await dlm.acquire('install/a', { ttlMs: 5_000 });
const whileHeld = await code(dlm.acquire('install/a', { ttlMs: 5_000, waitMs: 0 }));
await first.release();
const ran = await dlm.withLock('install/a', { ttlMs: 5_000 }, async (signal) => !signal.aborted);
await dlm.close();

// (b) core and the Redis adapter in process
const backend = redisBackend({ url: redisUrl });
await backend.ready();
const service = createLockService({ backend });
const one = await service.acquire({ name: 'install/b', owner: 'one', ttlMs: 5_000 });
const otherWhileHeld = await code(service.acquire({ name: 'install/b', owner: 'two', ttlMs: 5_000, waitMs: 0 }));
await service.release({ name: one.name, token: one.token });
const two = await service.acquire({ name: 'install/b', owner: 'two', ttlMs: 5_000 });
await service.release({ name: two.name, token: two.token });
await service.close();
await backend.close();

console.log(JSON.stringify({
  client: { token: String(first.token), whileHeld, ran },
  core: { otherWhileHeld, increasing: two.token > one.token },
}));
`,
    );
    const run = spawnSync(node, ['use.mjs', serverUrl, redis.url], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    const result = JSON.parse(run.stdout) as {
      client: { token: string; whileHeld: string; ran: boolean };
      core: { otherWhileHeld: string; increasing: boolean };
    };
    expect(BigInt(result.client.token)).toBeGreaterThan(0n);
    expect(result).toMatchObject({
      client: { whileHeld: 'LOCK_HELD', ran: true },
      core: { otherWhileHeld: 'LOCK_HELD', increasing: true },
    });
  });

  it('@dlm/cli alone installs the client and nothing of the backends; dlm serve says what to install', () => {
    expect(serverUrl, 'the previous test starts the server').not.toBe('');
    const dir = install('cli', ['@dlm/cli']);
    const packages = installedPackages(dir);
    const bytes = sizeOf(join(dir, 'node_modules'));
    console.log(
      `npm install @dlm/cli: ${packages.length} packages, ${(bytes / 1e6).toFixed(1)} MB (${packages.sort().join(', ')})`,
    );
    for (const heavy of [
      '@dlm/server',
      'etcd3',
      'ioredis',
      'node-zookeeper-client',
      'protobufjs',
      'pino',
    ]) {
      expect(packages).not.toContain(heavy);
    }
    expect(packages).toContain('@dlm/client');
    expect(packages.length).toBeLessThan(15);

    const dlm = join(dir, 'node_modules', '.bin', 'dlm');
    const serve = spawnSync(dlm, ['serve', '--memory'], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(serve.status).toBe(2);
    expect(serve.stderr).toMatch(
      /^dlm serve needs @dlm\/server: .*npm install -g @dlm\/server.*\n$/,
    );
    expect(serve.stderr.split('\n')).toHaveLength(2); // one line

    const get = spawnSync(dlm, ['get', 'install/cli', '--server', serverUrl], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(get.stderr).toBe('');
    expect(get.stdout).toBe('install/cli: free\n');
    expect(get.status).toBe(0);
  });
});
