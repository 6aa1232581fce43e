import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BackendCapabilities } from '@dlm/core';
import { freePort, type ManagedProcess, startProcess, tempDir } from '@dlm/test-services';
import { entryPoint } from './paths.js';
import type { Topology } from './topology.js';

/** The dlm server child process (server-entry.js) with its clock control. */
export interface DlmServer {
  process: ManagedProcess;
  port: number;
  /** `ws://127.0.0.1:PORT/v1/ws` */
  url: string;
  capabilities: BackendCapabilities;
  kind: string;
  clock(command: { jumpMs?: number; rate?: number }): Promise<void>;
}

async function healthy(port: number): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/healthz`, {
      signal: AbortSignal.timeout(1_000),
    });
    return response.ok;
  } catch {
    return false;
  }
}

/**
 * A server for a negative control: `early-token` (planted-early-token.ts), with its pause; or
 * `no-lock-delay`, a backend that says it keeps lock-delays and ignores them (any backend); or
 * `no-hold-cap`, likewise for caps on holding.
 */
export interface Plant {
  kind: 'early-token' | 'no-lock-delay' | 'no-hold-cap';
  pauseMs: number;
}

/**
 * Starts the dlm server on a free port, its backend as `topology` says (through the proxies);
 * with `plant`, a planted backend instead (a negative control).
 */
export async function startDlmServer(topology: Topology, plant?: Plant): Promise<DlmServer> {
  const port = await freePort();
  const controlPort = await freePort();
  const infoPath = join(tempDir('faults-server'), 'info.json');
  const managed = await startProcess({
    name: `dlm-server (${topology.variant}${plant ? `, planted ${plant.kind}` : ''})`,
    command: process.execPath,
    args: [
      entryPoint('server-entry.js'),
      '--port',
      String(port),
      '--log-level',
      'warn',
      ...topology.serverArgs,
    ],
    env: {
      DLM_FAULTS_CONTROL_PORT: String(controlPort),
      DLM_FAULTS_INFO: infoPath,
      ...(plant ? { DLM_FAULTS_PLANT: `${plant.kind}:${plant.pauseMs}` } : {}),
    },
    ready: () => healthy(port),
  });
  return finish(managed, port, controlPort, infoPath);
}

function finish(
  managed: ManagedProcess,
  port: number,
  controlPort: number,
  infoPath: string,
): DlmServer {
  const info = JSON.parse(readFileSync(infoPath, 'utf8')) as {
    kind: string;
    capabilities: BackendCapabilities;
  };
  return {
    process: managed,
    port,
    url: `ws://127.0.0.1:${port}/v1/ws`,
    capabilities: info.capabilities,
    kind: info.kind,
    async clock(command) {
      const response = await fetch(`http://127.0.0.1:${controlPort}/clock`, {
        method: 'POST',
        body: JSON.stringify(command),
        signal: AbortSignal.timeout(5_000),
      });
      if (!response.ok) throw new Error(`clock command failed: ${await response.text()}`);
    },
  };
}

/**
 * Heals whatever a segment's nemesis may have left broken: proxies, stopped or killed dlm
 * servers and backend members, skewed server clocks. Returns the failure's text, if any.
 */
export async function healAll(
  topology: Topology,
  servers: readonly DlmServer[],
): Promise<string | undefined> {
  for (const proxy of topology.proxies) proxy.heal();
  try {
    for (const server of servers) {
      if (!server.process.running) await server.process.start();
      server.process.resume();
      await server.clock({ rate: 1 });
    }
    for (const member of topology.members) {
      member.process.resume();
      if (!member.process.running) await member.process.start();
    }
    await topology.settled();
    return undefined;
  } catch (error) {
    return `heal: ${(error as Error).message}`;
  }
}
