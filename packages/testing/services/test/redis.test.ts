import { connect } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import {
  breakable,
  pingRedis,
  type RedisService,
  startRedis,
  startRedisNodes,
} from '../src/index.js';

/** One raw RESP round trip: enough to check what the server holds without a client library. */
function command(port: number, ...args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    let reply = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('no reply'));
    }, 2_000);
    socket.on('connect', () => {
      const parts = args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`);
      socket.write(`*${args.length}\r\n${parts.join('')}`);
    });
    socket.on('data', (chunk) => {
      reply += chunk.toString('utf8');
      if (reply.endsWith('\r\n')) {
        clearTimeout(timer);
        socket.destroy();
        resolve(reply.trimEnd());
      }
    });
    socket.on('error', reject);
  });
}

const enabled = breakable('redis');

describe.skipIf(!enabled)('startRedis', () => {
  const started: RedisService[] = [];
  afterAll(async () => {
    await Promise.all(started.map((service) => service.stop(1_000)));
  });

  it('serves PING on its own loopback port and is gone after kill', async () => {
    const redis = await startRedis();
    started.push(redis);
    expect(redis.url).toBe(`redis://127.0.0.1:${redis.port}`);
    expect(await pingRedis('127.0.0.1', redis.port)).toBe(true);
    await redis.kill();
    expect(redis.running).toBe(false);
    expect(await pingRedis('127.0.0.1', redis.port, 300)).toBe(false);
  });

  it('keeps acknowledged writes across kill -9 with aof, and loses them without', async () => {
    const durable = await startRedis({ aof: true });
    const volatile = await startRedis();
    started.push(durable, volatile);
    for (const service of [durable, volatile]) {
      expect(await command(service.port, 'INCR', 'counter')).toBe(':1');
      await service.kill();
      await service.start();
    }
    expect(await command(durable.port, 'GET', 'counter')).toBe('$1\r\n1');
    expect(await command(volatile.port, 'GET', 'counter')).toBe('$-1');
  });

  it('pause stops answers until resume', async () => {
    const redis = await startRedis();
    started.push(redis);
    redis.pause();
    expect(await pingRedis('127.0.0.1', redis.port, 300)).toBe(false);
    redis.resume();
    expect(await pingRedis('127.0.0.1', redis.port)).toBe(true);
  });

  it('startRedisNodes starts independent servers', async () => {
    const nodes = await startRedisNodes(3);
    started.push(...nodes);
    expect(new Set(nodes.map((node) => node.port)).size).toBe(3);
    await command(nodes[0]!.port, 'SET', 'k', 'v');
    expect(await command(nodes[1]!.port, 'GET', 'k')).toBe('$-1');
  });
});
