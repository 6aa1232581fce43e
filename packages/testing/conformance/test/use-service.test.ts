import { afterAll, describe, expect, it } from 'vitest';
import { killAndStart, useService } from '../src/index.js';

const log: string[] = [];

describe('useService', () => {
  const service = useService(async () => {
    log.push('start');
    return {
      id: 'svc',
      async stop() {
        log.push('stop');
      },
    };
  });

  it('has started the service before the first test, once', () => {
    expect(service().id).toBe('svc');
    expect(service().id).toBe('svc');
    expect(log).toEqual(['start']);
  });
});

// Registered after the describe, so it runs after the describe's own afterAll.
afterAll(() => {
  expect(log).toEqual(['start', 'stop']);
});

describe('killAndStart', () => {
  it('kills the service, then starts it again once the kill is done', async () => {
    const calls: string[] = [];
    await killAndStart({
      async kill() {
        await new Promise((resolve) => setTimeout(resolve, 10));
        calls.push('kill');
      },
      async start() {
        calls.push('start');
      },
    });
    expect(calls).toEqual(['kill', 'start']);
  });
});
