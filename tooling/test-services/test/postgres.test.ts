import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  type PostgresService,
  pingPostgres,
  postgresAvailable,
  postgresBinDir,
  postgresManaged,
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

const enabled = postgresAvailable() && postgresManaged();

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
    pg.pause();
    expect(await pingPostgres(pg.host, pg.port, 'postgres', 'postgres', 300)).toBe(false);
    pg.resume();
    expect(await pingPostgres(pg.host, pg.port)).toBe(true);
    await pg.stop();
    expect(pg.running).toBe(false);
  });
});
