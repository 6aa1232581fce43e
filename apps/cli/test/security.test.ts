import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hashToken, newToken, type RunningServer, startServer } from '@dlm/server';
import { findBinary, serviceAvailable, tempDir } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, runDlm } from './run-dlm.js';

const openssl = findBinary('openssl');
const available = serviceAvailable('openssl', openssl !== null);

// A server with TLS (a self-signed certificate for 127.0.0.1, made now, that is its own CA) and
// tokens; the CLI reaches it with DLM_TOKEN or --token-file, and --ca or DLM_CA.
describe.runIf(available)('the CLI against a server with tokens and TLS', () => {
  const ops = newToken();
  const ci = newToken();
  let server: RunningServer;
  let dir: string;
  let ca: string;
  let tokenFile: string;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    assertBuilt();
    dir = tempDir('cli-tls');
    ca = join(dir, 'cert.pem');
    execFileSync(
      openssl!,
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:P-256',
        '-nodes',
        '-subj',
        '/CN=127.0.0.1',
        '-days',
        '2',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
        '-addext',
        'basicConstraints=critical,CA:TRUE',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        ca,
      ],
      { stdio: 'ignore' },
    );
    tokenFile = join(dir, 'ci.token');
    writeFileSync(tokenFile, `${ci}\n`);
    server = await startServer({
      port: 0,
      tls: { cert: readFileSync(ca), key: readFileSync(join(dir, 'key.pem')) },
      auth: [
        { name: 'ops', sha256: hashToken(ops), actions: ['lock', 'watch', 'admin'] },
        { name: 'ci', sha256: hashToken(ci), prefixes: ['jobs/'] },
      ],
    });
    env = { DLM_URL: server.url, DLM_CA: ca };
  });
  afterAll(async () => {
    await server?.close();
  });

  it('dlm get reaches a wss:// server with the CA and a token', async () => {
    const done = await runDlm(['get', 'jobs/a'], { ...env, DLM_TOKEN: ci });
    expect(done).toMatchObject({ code: 0, stdout: 'jobs/a: free\n' });
  });

  it('without the CA the TLS check fails; without a token the server refuses', async () => {
    const noCa = await runDlm(['get', 'jobs/a', '--server', server.url], { DLM_TOKEN: ci });
    expect(noCa.code).toBe(1);
    // (The client reports the failed TLS check as UNAVAILABLE, without its reason.)
    expect(noCa.stderr).toContain('UNAVAILABLE');
    const noToken = await runDlm(['get', 'jobs/a'], env);
    expect(noToken.code).toBe(1);
    expect(noToken.stderr).toContain('UNAUTHENTICATED');
  });

  it('dlm lock runs the command under a lock its token allows, and is FORBIDDEN elsewhere', async () => {
    const done = await runDlm(
      [
        'lock',
        'jobs/build',
        '--token-file',
        tokenFile,
        '--ca',
        ca,
        '--',
        'sh',
        '-c',
        'echo "$DLM_FENCING_TOKEN"',
      ],
      { DLM_URL: server.url },
    );
    expect(done.code).toBe(0);
    expect(done.stdout).toMatch(/^\d+\n$/);
    const refused = await runDlm(['lock', 'deploy/prod', '--', 'true'], { ...env, DLM_TOKEN: ci });
    expect(refused.code).toBe(125);
    expect(refused.stderr).toContain('FORBIDDEN');
  });

  it('dlm ls uses the admin API over https with the token: admin lists, others are refused', async () => {
    const listed = await runDlm(['ls', '--json'], { ...env, DLM_TOKEN: ops });
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual({ locks: [] });
    const forbidden = await runDlm(['ls'], { ...env, DLM_TOKEN: ci });
    expect(forbidden.code).toBe(1);
    expect(forbidden.stderr).toContain('FORBIDDEN');
    const anonymous = await runDlm(['ls'], env);
    expect(anonymous.code).toBe(1);
    expect(anonymous.stderr).toContain('UNAUTHENTICATED');
  });

  it('an unreadable --token-file or --ca is a usage error', async () => {
    expect((await runDlm(['get', 'x', '--token-file', join(dir, 'missing')], env)).code).toBe(2);
    expect((await runDlm(['get', 'x', '--ca', join(dir, 'missing')], env)).code).toBe(2);
  });
});
