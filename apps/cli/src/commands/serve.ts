import { runServer, usage } from '@dlm/server';
import type { Command } from '../command.js';

export const serveCommand: Command = {
  name: 'serve',
  usage: usage('dlm serve'),
  async run(argv) {
    // The server's own runner: the same flags, environment, logs and signal handling as
    // dlm-server. It exits the process itself: 2 on a bad flag, 0 after a clean shutdown.
    await runServer(argv, 'dlm serve');
    return undefined;
  },
};
