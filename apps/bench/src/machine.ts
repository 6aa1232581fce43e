import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fourLetterWord } from '@dlm/test-services';

/** What the results were measured on: recorded next to every figure. */
export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memoryGiB: number;
  /** 1, 5 and 15 minute load averages. */
  loadAverage: number[];
  node: string;
  platform: string;
}

export function machineInfo(): MachineInfo {
  const cpu = cpus();
  return {
    cpuModel: cpu[0]?.model.trim() ?? 'unknown',
    cores: cpu.length,
    memoryGiB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    loadAverage: loadavg().map((load) => Math.round(load * 100) / 100),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
  };
}

const benchDir = fileURLToPath(new URL('..', import.meta.url));

/** Versions of the libraries benchmarked, read from their installed package.json files. */
export function packageVersions(): Record<string, string> {
  const names = [
    '@dlm/server',
    '@dlm/client',
    '@dlm/core',
    '@dlm/adapter-embedded',
    '@dlm/adapter-redis',
    '@dlm/adapter-redlock',
    '@dlm/adapter-etcd',
    '@dlm/adapter-zookeeper',
    '@dlm/adapter-postgres',
    'ioredis',
    'redlock',
    'redis-semaphore',
    'etcd3',
    'node-zookeeper-client',
    'pg',
  ];
  const versions: Record<string, string> = {};
  for (const name of names) {
    try {
      const pkg = JSON.parse(
        readFileSync(join(benchDir, 'node_modules', name, 'package.json'), 'utf8'),
      ) as { version: string };
      versions[name] = pkg.version;
    } catch {
      versions[name] = 'unknown';
    }
  }
  return versions;
}

function firstMatch(command: string, args: string[], pattern: RegExp): string {
  const result = spawnSync(command, args, { encoding: 'utf8' });
  return pattern.exec(`${result.stdout}${result.stderr}`)?.[1] ?? 'unknown';
}

/** redis-server and etcd versions from their binaries; ZooKeeper's is asked of the server. */
export async function serviceVersions(services: {
  zookeeper?: { members: Array<{ clientPort: number }> };
}): Promise<Record<string, string>> {
  const versions: Record<string, string> = {
    'redis-server': firstMatch('redis-server', ['--version'], /v=(\S+)/),
    etcd: firstMatch('etcd', ['--version'], /etcd Version: (\S+)/),
  };
  const member = services.zookeeper?.members[0];
  if (member) {
    const reply = await fourLetterWord('127.0.0.1', member.clientPort, 'srvr').catch(() => '');
    versions.zookeeper = /Zookeeper version: ([^-,\s]+)/.exec(reply)?.[1] ?? 'unknown';
  }
  return versions;
}

/** The soft and hard open-file limits (`ulimit -n`, `ulimit -Hn`) child processes inherit. */
export function openFileLimits(): { soft: number; hard: number } {
  const read = (flag: string) => {
    const out = spawnSync('sh', ['-c', `ulimit ${flag}`], { encoding: 'utf8' }).stdout.trim();
    return out === 'unlimited' ? Number.POSITIVE_INFINITY : Number(out) || 1024;
  };
  return { soft: read('-n'), hard: read('-Hn') };
}
