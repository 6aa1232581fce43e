import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/index.js';

const parse = (argv: string[], env: NodeJS.ProcessEnv = {}) =>
  parseConfig(['--memory', ...argv], env)!;

describe('Dapr flags', () => {
  it('are off unless --dapr-stores (or DLM_DAPR_STORES) names stores', () => {
    expect(parse([]).dapr).toBeNull();
    expect(parse(['--dapr-stores', 'lockstore=dapr/,orders=orders/locks/']).dapr).toEqual({
      stores: { lockstore: 'dapr/', orders: 'orders/locks/' },
    });
    expect(parse([], { DLM_DAPR_STORES: 'lockstore=', DLM_DAPR_GRPC_PORT: '50001' }).dapr).toEqual({
      stores: { lockstore: '' },
      grpcPort: 50_001,
    });
  });

  it('refuse what they cannot mean, naming the flag', () => {
    const cases: Array<[string[], RegExp]> = [
      [['--dapr-stores', 'lockstore'], /NAME=PREFIX/],
      [['--dapr-stores', '=dapr/'], /NAME=PREFIX/],
      [['--dapr-stores', 'a=x/,a=y/'], /names a twice/],
      [['--dapr-stores', ','], /names no store/],
      [['--dapr-grpc-port', '50001'], /needs --dapr-stores/],
      [['--dapr-stores', 's=p/', '--dapr-grpc-port', '70000'], /0-65535/],
      [['--dapr-stores', 's=p/', '--dapr-grpc-port', 'x'], /--dapr-grpc-port/],
    ];
    for (const [argv, message] of cases) expect(() => parse(argv), argv.join(' ')).toThrow(message);
  });
});
