import { createConnection } from 'node:net';
import { redisBackend } from '@dlm/adapter-redis';
import { breakable, type RedisService, startRedis } from '@dlm/test-services';
import { afterAll, describe, expect, it } from 'vitest';
import { createWallClockOffset, wallClockShim } from '../src/wall-clock-shim.js';

const shim = breakable('redis') ? wallClockShim() : null;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One command to a Redis on loopback; its reply's values (integers and bulk strings), flat. */
function command(port: number, ...args: string[]): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let text = '';
    socket.on('data', (chunk) => {
      text += chunk.toString();
      const lines = text.split('\r\n');
      const head = lines[0] ?? '';
      const count = head.startsWith('*') ? Number(head.slice(1)) : 1;
      const values = lines.filter((_line, i) => i > 0 || !head.startsWith('*'));
      const flat = values.filter((line) => line !== '' && !line.startsWith('$'));
      if (flat.length >= count) {
        socket.end();
        resolve(flat.slice(0, count).map((v) => v.replace(/^[:+]/, '')));
      }
    });
    socket.on('error', reject);
    socket.write(
      `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`,
    );
  });
}

async function serverMs(port: number): Promise<number> {
  const [seconds, micros] = await command(port, 'TIME');
  return Number(seconds) * 1_000 + Number(micros) / 1_000;
}

describe.skipIf(!shim)("a Redis server's wall clock moved by the shim", () => {
  const services: RedisService[] = [];
  const closers: Array<() => Promise<void> | void> = [];
  afterAll(async () => {
    for (const close of closers) await close();
    await Promise.all(services.map((service) => service.stop(1_000)));
  });

  async function shimmedRedis() {
    const offset = createWallClockOffset(shim!);
    const service = await startRedis({ env: offset.env });
    services.push(service);
    return { offset, service };
  }

  async function backend(url: string, fenceRetentionMs: number) {
    const created = redisBackend({ url, fenceRetentionMs });
    closers.push(() => created.close());
    await created.ready();
    return created;
  }

  async function grantAndRelease(lock: Awaited<ReturnType<typeof backend>>, name: string) {
    const result = await lock.tryAcquire({ name, owner: `o${Math.random()}`, ttlMs: 200 });
    if (!result.granted) throw new Error('expected a grant');
    await lock.release({ name, token: result.grant.token });
    return result.grant.token;
  }

  it('steps TIME back and forth', async () => {
    const { offset, service } = await shimmedRedis();
    expect(Math.abs((await serverMs(service.port)) - Date.now())).toBeLessThan(1_000);
    offset.set(-30_000);
    await sleep(50);
    expect((await serverMs(service.port)) - Date.now()).toBeLessThan(-29_000);
    offset.set(0);
    await sleep(50);
    expect(Math.abs((await serverMs(service.port)) - Date.now())).toBeLessThan(1_000);
  });

  it('tokens keep growing when the clock steps back by less than fenceRetentionMs', async () => {
    const { offset, service } = await shimmedRedis();
    const lock = await backend(service.url, 10_000);
    const name = 'clock/within';
    const before = await grantAndRelease(lock, name);
    offset.set(-2_000);
    await sleep(50);
    const after = await grantAndRelease(lock, name);
    expect(after).toBeGreaterThan(before);
  });

  it('the stated assumption is needed: a step back by more than fenceRetentionMs after the fence key expired can repeat a lower token', async () => {
    const { offset, service } = await shimmedRedis();
    const lock = await backend(service.url, 200);
    const name = 'clock/beyond';
    const before = await grantAndRelease(lock, name);
    const deadline = performance.now() + 3_000;
    const keys = async () => Number((await command(service.port, 'DBSIZE'))[0]);
    while ((await keys()) > 0 && performance.now() < deadline) await sleep(50);
    expect(await keys()).toBe(0);
    offset.set(-10_000);
    await sleep(50);
    const after = await grantAndRelease(lock, name);
    expect(after).toBeLessThan(before);
  });
});
