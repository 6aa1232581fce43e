// Leader election with @dlm/client: run two or more of these against one dlm server. One leads
// and does the work; the others follow, watching who leads. Kill the leader (even with kill -9)
// and a follower takes over within the lease's TTL.
//
//   pnpm --filter @dlm/client build
//   node packages/client/examples/leader.mjs ws://127.0.0.1:7070 [name] [ttlMs]
//
// It runs against the built package (dist), as a user's program would.
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from '@dlm/client';

const [url = 'ws://127.0.0.1:7070', name = 'examples/leader', ttlArg = '2000'] =
  process.argv.slice(2);
const ttlMs = Number(ttlArg);
const me = `${hostname()}/${process.pid}`;
const log = (line) => console.log(`${new Date().toISOString()} ${me} ${line}`);

const client = createClient({ url, name: 'leader-example' });
client.on('error', (error) => log(`client error: ${error.message}`));
const stopping = new AbortController();

// Followers (and the leader too) watch who leads.
const observing = (async () => {
  for await (const leader of client.observe(name, { signal: stopping.signal })) {
    log(leader ? `observed leader=${leader.owner} term=${leader.term}` : 'observed leader=none');
  }
})();

/** The leader-only work: runs until leadership is lost (the signal aborts). */
async function lead(leadership) {
  let tick = 0;
  while (!leadership.signal.aborted) {
    // Pass leadership.term to whatever the leader writes: it is a fencing token, so the
    // resource can refuse a deposed leader's late writes (see the README's fencing recipes).
    log(`work term=${leadership.term} tick=${tick++}`);
    // Ends early when leadership is lost; the signal keeps no listener once the sleep is over.
    await sleep(250, undefined, { signal: leadership.signal }).catch(() => {});
  }
}

async function main() {
  log(`campaigning for ${name} (ttl ${ttlMs} ms)`);
  while (!stopping.signal.aborted) {
    let leadership;
    try {
      leadership = await client.campaign(name, { ttlMs, owner: me, signal: stopping.signal });
    } catch (error) {
      if (stopping.signal.aborted) break;
      throw error;
    }
    log(`leading term=${leadership.term}`);
    await lead(leadership);
    if (leadership.lease.lost) log(`lost term=${leadership.term} reason=${leadership.lease.lost}`);
    // Losing leadership is an event: campaign again.
  }
}

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, async () => {
    log(`${signal}: stepping down`);
    stopping.abort();
    await client.close(); // releases the lock if we lead, so a follower takes over at once
  });
}

await main();
await observing;
await client.close();
