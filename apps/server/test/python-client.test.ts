import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { findBinary, serviceAvailable } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../src/index.js';

const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const python = findBinary('python3');
const available = serviceAvailable('python3', python !== null);

/** Runs the Python client's unittest suite (which replays the golden transcripts too). */
function runUnittest(url: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      python!,
      ['-m', 'unittest', 'discover', '-s', 'clients/python/tests', '-v'],
      {
        cwd: repoRoot,
        env: { ...process.env, DLM_URL: url, PYTHONPATH: 'clients/python', PYTHONUNBUFFERED: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
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

describe.skipIf(!available)('Python client (clients/python)', () => {
  let server: RunningServer;
  beforeAll(async () => {
    server = await startServer({ port: 0 });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('passes its unittest suite, golden transcripts included, against a live server', {
    timeout: 180_000,
  }, async () => {
    const { code, output } = await runUnittest(server.url);
    const ran = Number(/^Ran (\d+) tests? in /m.exec(output)?.[1] ?? 0);
    expect(code, output).toBe(0);
    expect(ran, output).toBeGreaterThan(0);
    // Every test ran: a skip would mean DLM_URL did not reach the suite.
    expect(output, output).not.toMatch(/skipped/);
    // The transcripts were replayed from Python, one test each.
    expect(output).toMatch(/test_wait_fifo \(test_transcripts\.GoldenTranscripts/);
  });
});
