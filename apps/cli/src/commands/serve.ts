import type { Command } from '../command.js';
import { EXIT } from '../exit-codes.js';

/** The package that holds the server; an optional peer of the CLI, so `dlm lock` stays small. */
const SERVER_PACKAGE = '@dlm/server';

/** What `dlm serve` prints, on one line, when the server is not installed. */
export const SERVER_MISSING = `dlm serve needs ${SERVER_PACKAGE}: install it next to @dlm/cli (npm install -g ${SERVER_PACKAGE}), or run its dlm-server\n`;

/** Only the server package itself being absent; a broken install inside it stays an error. */
function isServerMissing(error: unknown): boolean {
  return (
    error instanceof Error &&
    (error as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND' &&
    error.message.includes(`'${SERVER_PACKAGE}'`)
  );
}

/**
 * `dlm serve`, loaded only when it runs: the server (and every backend it brings) is imported
 * from `@dlm/server` when that is installed, and is otherwise a one-line hint.
 */
export async function loadServeCommand(): Promise<Command> {
  let server: typeof import('@dlm/server');
  try {
    server = await import('@dlm/server');
  } catch (error) {
    if (!isServerMissing(error)) throw error;
    return {
      name: 'serve',
      usage: `Usage: dlm serve [dlm-server flags]\n\n${SERVER_MISSING}`,
      async run() {
        process.stderr.write(SERVER_MISSING);
        return EXIT.USAGE;
      },
    };
  }
  return {
    name: 'serve',
    usage: server.usage('dlm serve'),
    async run(argv) {
      // The server's own runner: the same flags, environment, logs and signal handling as
      // dlm-server. It exits the process itself: 2 on a bad flag, 0 after a clean shutdown.
      await server.runServer(argv, 'dlm serve');
      return undefined;
    },
  };
}
