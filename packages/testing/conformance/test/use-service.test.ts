import { afterAll, describe, expect, it } from 'vitest';
import { useService } from '../src/index.js';

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
