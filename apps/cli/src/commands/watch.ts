import { createClient, type LockChange } from '@dlm/client';
import { nameCommand } from '../command.js';
import { CONNECTION_USAGE, clientOptions, connectionOptions } from '../connection-options.js';
import { EXIT } from '../exit-codes.js';
import { printError, printJson } from '../output.js';
import { noticeWaiting } from '../waiting-notice.js';

const USAGE = `Usage: dlm watch NAME [--server URL] [--json]

Prints lock NAME's state now, then a line each time it changes (granted, released, expired,
revoked), until interrupted (Ctrl-C). Reconnects by itself if the connection drops; changes
made while disconnected are not replayed, the state after reconnecting is printed instead.

Options:
${CONNECTION_USAGE}
  --json             one JSON object per line: {"time","name","held","owner","token",
                     "mode","holders"}
  -h, --help         print this help

Exit status: 0 when interrupted, 1 when the watch could not start, 2 on a usage error.
`;

function print(change: LockChange, json: boolean | undefined): void {
  const time = new Date().toISOString();
  if (json) {
    printJson({ time, ...change });
    return;
  }
  const count =
    change.holders === undefined
      ? ''
      : `, ${change.holders} holder${change.holders === 1 ? '' : 's'}`;
  let line: string;
  if (!change.held) line = 'free';
  else if (change.owner === undefined && change.holders !== undefined) {
    // One of several shared holders ended; the others hold on.
    line = `a holder left${count}`;
  } else {
    const shared = change.mode === 'shared' ? ' shared' : '';
    line = `held${shared} by ${change.owner ?? '?'}${change.token === undefined ? '' : ` (token ${change.token})`}${shared ? count : ''}`;
  }
  process.stdout.write(`${time}  ${change.name}  ${line}\n`);
}

export const watchCommand = nameCommand('watch', USAGE, async ({ values, name }) => {
  const connection = connectionOptions(values);
  const client = createClient({ ...clientOptions(connection), name: 'dlm-cli' });
  noticeWaiting(client, connection.url);
  client.on('disconnected', ({ willReconnect }) => {
    if (willReconnect) process.stderr.write('dlm: connection lost; reconnecting…\n');
  });
  client.on('connected', ({ reconnected }) => {
    if (reconnected) process.stderr.write('dlm: reconnected\n');
  });
  try {
    await client.watch(name, (change) => print(change, values.json));
  } catch (error) {
    printError(error);
    await client.close();
    return EXIT.FAILURE;
  }
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await client.close();
  return EXIT.OK;
});
