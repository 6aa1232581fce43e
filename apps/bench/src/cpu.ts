import { readFileSync } from 'node:fs';

/**
 * CPU time of processes, to say where a workload's time went: the benchmark process itself
 * (the clients), the dlm server process, and the backend services. Read from
 * /proc/PID/stat (utime + stime, in clock ticks of 10 ms), so only meaningful over seconds.
 */

const TICK_MS = 10;

/** User + system CPU time of `pid` so far, in ms; NaN when it cannot be read. */
export function processCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name may contain spaces; the fields after its closing parenthesis are fixed.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return Number.NaN;
  }
}

export interface CpuPids {
  /** The dlm server process (absent for peers). */
  server?: number | undefined;
  /** The services the target talks to (redis-server, etcd, ZooKeeper's JVM). */
  backend: number[];
}

export interface CpuSnapshot {
  client: number;
  server: number;
  backend: number;
}

export function cpuSnapshot(pids: CpuPids): CpuSnapshot {
  const self = process.cpuUsage();
  return {
    client: (self.user + self.system) / 1_000,
    server: pids.server === undefined ? Number.NaN : processCpuMs(pids.server),
    // No services (the embedded backend): not measured rather than zero.
    backend: pids.backend.length
      ? pids.backend.reduce((sum, pid) => sum + processCpuMs(pid), 0)
      : Number.NaN,
  };
}

/** CPU ms spent between two snapshots, per operation, in µs. */
export function cpuPerOperation(
  before: CpuSnapshot,
  after: CpuSnapshot,
  operations: number,
): CpuSnapshot {
  const per = (key: keyof CpuSnapshot) =>
    operations > 0 ? ((after[key] - before[key]) * 1_000) / operations : Number.NaN;
  return { client: per('client'), server: per('server'), backend: per('backend') };
}
