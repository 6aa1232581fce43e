import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  breakable,
  type PostgresService,
  pingPostgres,
  postgresBinDir,
  startPostgres,
} from '../src/index.js';

/** One statement through psql (from the same installation), rows as `a|b` lines. */
function sql(pg: PostgresService, statement: string): string {
  const psql = join(postgresBinDir() ?? '/usr/bin', 'psql');
  const result = spawnSync(
    psql,
    ['-h', pg.host, '-p', String(pg.port), '-U', pg.user, '-d', pg.database, '-Atqc', statement],
    { encoding: 'utf8', timeout: 10_000 },
  );
  if (result.status !== 0) throw new Error(`psql failed: ${result.stderr}`);
  return result.stdout.trim();
}

/** A session opened with the wire protocol (trust auth), ready for a simple Query. */
async function openSession(pg: PostgresService): Promise<Socket> {
  const socket = connect({ host: pg.host, port: pg.port });
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.once('connect', () => {
      const body = Buffer.from(`user\0${pg.user}\0database\0${pg.database}\0\0`, 'utf8');
      const header = Buffer.alloc(8);
      header.writeInt32BE(8 + body.length, 0);
      header.writeInt32BE(196_608, 4);
      socket.write(Buffer.concat([header, body]));
    });
    let seen = '';
    const onData = (chunk: Buffer) => {
      seen += chunk.toString('latin1');
      // ReadyForQuery: 'Z', length 5, status 'I'.
      if (seen.includes('Z\0\0\0\x05I')) {
        socket.off('data', onData);
        resolve();
      }
    };
    socket.on('data', onData);
  });
  return socket;
}

/** Sends `select 1` and resolves true when any reply arrives within `ms`. */
function answersWithin(socket: Socket, ms: number): Promise<boolean> {
  const text = Buffer.from('select 1\0', 'utf8');
  const header = Buffer.alloc(5);
  header.write('Q', 0, 'latin1');
  header.writeInt32BE(4 + text.length, 1);
  socket.write(Buffer.concat([header, text]));
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      socket.off('data', onData);
      resolve(false);
    }, ms);
    const onData = () => {
      clearTimeout(timer);
      resolve(true);
    };
    socket.once('data', onData);
  });
}

const enabled = breakable('postgres');

describe.skipIf(!enabled)('startPostgres', () => {
  let pg: PostgresService | undefined;
  afterAll(async () => {
    await pg?.stop();
  });

  it('serves a fresh cluster on a free loopback port, as a non-root user when run as root', async () => {
    pg = await startPostgres();
    expect(pg.url).toBe(`postgres://postgres@127.0.0.1:${pg.port}/postgres`);
    expect(await pingPostgres(pg.host, pg.port)).toBe(true);
    expect(sql(pg, 'select 1 + 1')).toBe('2');
    if (process.getuid?.() === 0) {
      // PostgreSQL refuses root: the cluster and the server belong to another user.
      expect(statSync(pg.dir).uid).not.toBe(0);
      expect(sql(pg, "select current_setting('data_directory')")).toBe(pg.dir);
    }
  });

  it('kill -9 and start again keeps the data; a paused server answers nothing', async () => {
    if (!pg) throw new Error('the first test did not start PostgreSQL');
    sql(pg, 'create table kept (v int); insert into kept values (42)');
    await pg.kill();
    expect(pg.running).toBe(false);
    expect(await pingPostgres(pg.host, pg.port, 'postgres', 'postgres', 300)).toBe(false);
    await pg.start();
    expect(sql(pg, 'select v from kept')).toBe('42');
    // A session opened before the pause is served by its own backend process: that one stops
    // too, so its query is answered only after the resume.
    const session = await openSession(pg);
    pg.pause();
    expect(await pingPostgres(pg.host, pg.port, 'postgres', 'postgres', 300)).toBe(false);
    expect(await answersWithin(session, 300)).toBe(false);
    const answered = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 3_000);
      session.once('data', () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    pg.resume();
    expect(await answered).toBe(true);
    expect(await pingPostgres(pg.host, pg.port)).toBe(true);
    session.destroy();
    await pg.stop();
    expect(pg.running).toBe(false);
  });
});
