import { get } from 'node:https';
import { serviceAvailable } from '@dlm/test-services';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken, newToken, parseConfig, type RunningServer, startServer } from '../src/index.js';
import { makeCertificates, opensslPath, type TestCertificates } from './tls-files.js';
import { connect, upgradeOutcome } from './ws-peer.js';

const available = serviceAvailable('openssl', opensslPath !== null);

function httpsGet(url: string, ca?: Buffer): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    get(url, ca ? { ca } : {}, (response) => {
      let body = '';
      response.on('data', (chunk) => {
        body += chunk;
      });
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    }).on('error', reject);
  });
}

describe.runIf(available)('TLS', () => {
  let certs: TestCertificates;
  let server: RunningServer;
  const token = newToken();

  beforeAll(async () => {
    certs = makeCertificates();
    server = await startServer({
      port: 0,
      tls: { cert: certs.cert, key: certs.key },
      auth: [{ name: 'ops', sha256: hashToken(token), actions: ['lock', 'watch', 'admin'] }],
    });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('serves wss:// and https:// on one port to a client that trusts the CA', async () => {
    expect(server.url).toBe(`wss://127.0.0.1:${server.port}/v1/ws`);
    expect(server.httpUrl).toBe(`https://127.0.0.1:${server.port}`);
    const peer = await connect(server.url, undefined, { ca: certs.ca });
    await peer.hello(token);
    const lease = await peer.call('lock.acquire', { name: 'tls/a', ttlMs: 5_000 });
    expect(lease.result.token).toMatch(/^\d+$/);
    peer.close();
    const health = await httpsGet(`${server.httpUrl}/healthz`, certs.ca);
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body)).toMatchObject({ status: 'ok' });
  });

  it('a client that does not trust the CA is refused by its own TLS check', async () => {
    expect(await upgradeOutcome(server.url)).toMatch(/certificate/i);
    await expect(httpsGet(`${server.httpUrl}/healthz`)).rejects.toThrow(/certificate/i);
  });

  it('plain ws:// to the TLS port gets no WebSocket', async () => {
    expect(await upgradeOutcome(`ws://127.0.0.1:${server.port}/v1/ws`)).not.toBe('open');
  });

  it('parseConfig reads --tls-cert and --tls-key, and wants both', () => {
    const config = parseConfig(['--tls-cert', certs.certFile, '--tls-key', certs.keyFile], {});
    expect(config?.tls?.cert.equals(certs.cert)).toBe(true);
    expect(config?.tls?.key.equals(certs.key)).toBe(true);
    expect(() => parseConfig(['--tls-cert', certs.certFile], {})).toThrow(/go together/);
    expect(
      parseConfig([], { DLM_TLS_CERT: certs.certFile, DLM_TLS_KEY: certs.keyFile })?.tls,
    ).not.toBeNull();
  });
});
