import { formatDuration } from '@dlm/flags';
import { nameCommand } from '../command.js';
import { CONNECTION_USAGE, oneShotClient } from '../connection-options.js';
import { EXIT } from '../exit-codes.js';
import { printError, printJson } from '../output.js';

const USAGE = `Usage: dlm get NAME [--server URL] [--json]

Prints who holds lock NAME, its fencing token and its remaining TTL, or that it is free. A
lock held shared lists every holder (owner, token, TTL left), ordered by token.

Options:
${CONNECTION_USAGE}
  --json             one JSON object: {"name","held","owner","token","ttlRemainingMs",
                     "mode","limit","holders","waiters","waitersScope"} (owner, token, TTL:
                     the highest token's; waiters: how many wait, on every server when
                     waitersScope is "backend", on this one when "server")
  -h, --help         print this help

Exit status: 0 (held or free), 1 when the server could not answer, 2 on a usage error.
`;

export const getCommand = nameCommand('get', USAGE, async ({ values, name }) => {
  const client = oneShotClient(values);
  try {
    const info = await client.get(name);
    if (values.json) printJson(info);
    else if (!info.held) process.stdout.write(`${name}: free\n`);
    else if (info.mode !== 'shared') {
      process.stdout.write(
        `${name}: held by ${info.owner}, token ${info.token}, ${formatDuration(info.ttlRemainingMs)} left\n`,
      );
    } else {
      const count = info.holders.length;
      const lines = info.holders.map(
        (holder) =>
          `  ${holder.owner}, token ${holder.token}, ${formatDuration(holder.ttlRemainingMs)} left\n`,
      );
      process.stdout.write(
        `${name}: held shared by ${count} holder${count === 1 ? '' : 's'} (limit ${info.limit})\n${lines.join('')}`,
      );
    }
    return EXIT.OK;
  } catch (error) {
    printError(error);
    return EXIT.FAILURE;
  } finally {
    await client.close();
  }
});
