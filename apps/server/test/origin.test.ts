import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken, newToken, type RunningServer, startServer } from '../src/index.js';
import { createOriginPolicy } from '../src/origin-policy.js';
import { rawUpgrade } from './raw-socket.js';

/** `open` or the refusal's status line, for an upgrade with these Origin and Host headers. */
async function upgradeWith(port: number, headers: Record<string, string>): Promise<string> {
  try {
    const peer = await rawUpgrade(port, { headers });
    peer.socket.destroy();
    return 'open';
  } catch (error) {
    return (error as Error).message.replace(/^upgrade refused: HTTP\/1\.1 /, '');
  }
}

describe('browser origins', () => {
  let open: RunningServer;
  let listed: RunningServer;
  let withTokens: RunningServer;
  beforeAll(async () => {
    open = await startServer({ port: 0 });
    listed = await startServer({ port: 0, allowedOrigins: ['https://ops.example.com'] });
    withTokens = await startServer({
      port: 0,
      auth: [{ name: 'a', sha256: hashToken(newToken()) }],
    });
  });
  afterAll(async () => {
    await Promise.all([open.close(), listed.close(), withTokens.close()]);
  });

  it("a page from another origin cannot open a WebSocket (403); the server's own pages can", async () => {
    const host = `127.0.0.1:${open.port}`;
    expect(await upgradeWith(open.port, { Origin: 'http://evil.example', Host: host })).toBe(
      '403 Forbidden',
    );
    expect(await upgradeWith(open.port, { Origin: `http://${host}`, Host: host })).toBe('open');
    expect(
      await upgradeWith(open.port, {
        Origin: `http://localhost:${open.port}`,
        Host: `localhost:${open.port}`,
      }),
    ).toBe('open');
    // Not a browser: no Origin, no check.
    expect(await upgradeWith(open.port, { Host: host })).toBe('open');
  });

  it('without tokens a DNS-rebound name is refused even though it is same-origin; with tokens it is not', async () => {
    const rebound = (port: number) => ({
      Origin: `http://rebind.example:${port}`,
      Host: `rebind.example:${port}`,
    });
    expect(await upgradeWith(open.port, rebound(open.port))).toBe('403 Forbidden');
    expect(await upgradeWith(withTokens.port, rebound(withTokens.port))).toBe('open');
  });

  it('--allowed-origins lets the listed origins in and no others', async () => {
    const host = `127.0.0.1:${listed.port}`;
    expect(await upgradeWith(listed.port, { Origin: 'https://ops.example.com', Host: host })).toBe(
      'open',
    );
    expect(await upgradeWith(listed.port, { Origin: 'https://ops.example.org', Host: host })).toBe(
      '403 Forbidden',
    );
  });

  it('an admin request from a foreign page is refused with 403', async () => {
    const path = `${open.httpUrl}/v1/locks/${encodeURIComponent('x')}`;
    const foreign = await fetch(path, {
      method: 'DELETE',
      headers: { origin: 'http://evil.example' },
    });
    expect(foreign.status).toBe(403);
    expect(((await foreign.json()) as any).error.code).toBe('FORBIDDEN');
    // Without an Origin the request goes through (and finds no lock).
    expect((await fetch(path, { method: 'DELETE' })).status).toBe(404);
  });

  it('the policy: `*` allows any origin, `null` and garbage none', () => {
    const any = createOriginPolicy({ allowedOrigins: ['*'], authRequired: false });
    expect(any.allows('http://evil.example', 'x:1')).toBe(true);
    const own = createOriginPolicy({ allowedOrigins: [], authRequired: false });
    expect(own.allows('null', '127.0.0.1:1')).toBe(false);
    expect(own.allows('not a url', '127.0.0.1:1')).toBe(false);
    expect(own.allows('http://[::1]:7070', '[::1]:7070')).toBe(true);
    expect(own.allows('http://127.0.0.1:7070', '127.0.0.1:7071')).toBe(false);
  });
});
