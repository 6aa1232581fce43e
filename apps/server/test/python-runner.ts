import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { findBinary, serviceAvailable } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../src/index.js';
import type { ServerConfiguration } from './server-configurations.js';

const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const python = findBinary('python3');
export const pythonAvailable = serviceAvailable('python3', python !== null);

/**
 * Runs the Python client's unittest suite (which replays the golden transcripts too), or the
 * tests `names` of it (`test_transcripts.GoldenTranscripts`).
 */
export function runUnittest(
  url: string,
  names: string[] = [],
  without: readonly string[] = [],
): Promise<{ code: number | null; output: string }> {
  const args =
    names.length === 0
      ? ['-m', 'unittest', 'discover', '-s', 'clients/python/tests', '-v']
      : ['-m', 'unittest', '-v', ...names];
  return new Promise((resolve, reject) => {
    const child = spawn(python!, args, {
      cwd: repoRoot,
      env: {
        ...process.env,
        DLM_URL: url,
        DLM_TRANSCRIPTS_WITHOUT: without.join(','),
        PYTHONPATH: names.length === 0 ? 'clients/python' : 'clients/python:clients/python/tests',
        PYTHONUNBUFFERED: '1',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 170_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

/** What every run must show: it passed, ran tests, skipped none, and replayed the transcripts. */
export function expectPassed({ code, output }: { code: number | null; output: string }): void {
  const ran = Number(/^Ran (\d+) tests? in /m.exec(output)?.[1] ?? 0);
  expect(code, output).toBe(0);
  expect(ran, output).toBeGreaterThan(0);
  // Every test ran: a skip would mean DLM_URL did not reach the suite.
  expect(output, output).not.toMatch(/skipped/);
  // The transcripts were replayed from Python, one test each.
  expect(output).toMatch(/test_wait_fifo \(test_transcripts\.GoldenTranscripts/);
  expect(output).toMatch(/test_watch_prefix_shared \(test_transcripts\.GoldenTranscripts/);
}

/**
 * The Python client's transcript runner against a server in each configuration (split over
 * python-client.test.ts and python-transcripts.test.ts, so that they run side by side).
 */
export function replayFromPython(configurations: readonly ServerConfiguration[]): void {
  for (const configuration of configurations) {
    describe.skipIf(!pythonAvailable || !configuration.available)(
      `Python client's transcript runner: ${configuration.name}`,
      () => {
        let server: RunningServer;
        beforeAll(async () => {
          const backendConfig = await configuration.start();
          server = await startServer({ port: 0, backendConfig: backendConfig() });
        }, 60_000);
        afterAll(async () => {
          await server?.close();
          await configuration.stop();
        });

        it('replays every golden transcript', { timeout: 180_000 }, async () => {
          const names = ['test_transcripts.GoldenTranscripts'];
          expectPassed(await runUnittest(server.url, names, configuration.without));
        });
      },
    );
  }
}
