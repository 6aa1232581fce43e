import { existsSync } from 'node:fs';
import { findBinary, serviceAvailable } from '@dlm/test-services';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashToken, newToken, type RunningServer, startServer } from '../src/index.js';
import { connect, openSession, type Peer } from './ws-peer.js';

// Debian's chromium package (`apt-get install chromium`), driven by playwright-core: no
// browser download. DLM_CHROMIUM points elsewhere.
const CHROMIUM =
  process.env.DLM_CHROMIUM ||
  (existsSync('/usr/bin/chromium') ? '/usr/bin/chromium' : findBinary('chromium'));
const available = serviceAvailable('chromium', CHROMIUM !== null && existsSync(CHROMIUM));

/** Where the screenshots go (looked at by hand; not compared). */
const SHOTS = process.env.DLM_SCREENSHOT_DIR ?? '/tmp';

let server: RunningServer;
let browser: Browser;
const peers: Peer[] = [];

async function session(): Promise<Peer> {
  const peer = await openSession(server.url);
  peers.push(peer);
  return peer;
}

async function openDashboard(
  options: { width: number; height: number },
  query = '',
  before?: (page: Page) => Promise<unknown>,
) {
  const page = await browser.newPage({ viewport: options });
  await before?.(page);
  const problems: string[] = [];
  page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console: ${message.text()}`);
  });
  await page.goto(`${server.httpUrl}/${query}`);
  await page.locator('#status[data-state="live"]').waitFor();
  return { page, problems };
}

const row = (page: Page, name: string) => page.locator(`#lock-rows tr[data-name="${name}"]`);

/**
 * A scripted load until `stop()`: per name, three sessions that queue for it (so it is
 * contended), hold it 50–250 ms and release it; and one session whose short leases expire.
 */
async function startLoad(names: readonly string[]) {
  let running = true;
  const contenders = await Promise.all(names.flatMap(() => [session(), session(), session()]));
  const loops = contenders.map(async (peer, i) => {
    const name = names[i % names.length]!;
    while (running) {
      const { result, error } = await peer.call('lock.acquire', {
        name,
        owner: `worker-${i}`,
        ttlMs: 5_000,
        waitMs: 10_000,
      });
      if (!result) throw new Error(`the load's acquire failed: ${JSON.stringify(error)}`);
      await new Promise((resolve) => setTimeout(resolve, 50 + ((i * 67) % 200)));
      await peer.call('lock.release', { name, token: result.token });
    }
  });
  const expirer = await session();
  loops.push(
    (async () => {
      for (let n = 0; running; n += 1) {
        await expirer.call('lock.acquire', { name: `load/lapse-${n % 4}`, ttlMs: 300 });
        await new Promise((resolve) => setTimeout(resolve, 400));
      }
    })(),
  );
  return async () => {
    running = false;
    await Promise.all(loops);
  };
}

/** What the charts show now: the rates chart's lines and total, and the bars' figures. */
function chartState(page: Page) {
  return page.evaluate(`({
    total: Number(document.getElementById('rates').dataset.total),
    lines: [...document.querySelectorAll('#rates polyline')].map((line) => line.getAttribute('points')).join('|'),
    waited: Number(document.getElementById('wait-times').dataset.count),
    held: Number(document.getElementById('hold-times').dataset.count),
    contended: [...document.querySelectorAll('#contended li[data-name]')].map((item) => item.dataset.name),
    feed: document.querySelectorAll('#feed li').length,
  })`) as Promise<{
    total: number;
    lines: string;
    waited: number;
    held: number;
    contended: string[];
    feed: number;
  }>;
}

describe.runIf(available)('the dashboard in headless Chromium', () => {
  beforeAll(async () => {
    server = await startServer({ port: 0 });
    browser = await chromium.launch({
      executablePath: CHROMIUM!,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
  });
  afterAll(async () => {
    for (const peer of peers) peer.close();
    await browser?.close();
    await server?.close();
  });

  it('shows a lock a client acquires, counts its TTL down, and drops it on release', async () => {
    const { page, problems } = await openDashboard({ width: 1200, height: 800 });
    expect(await page.locator('#empty').isVisible()).toBe(true);

    const client = await session();
    const lease = (
      await client.call('lock.acquire', { name: 'ui/build', ttlMs: 30_000, owner: 'ci-runner-7' })
    ).result;
    const built = row(page, 'ui/build');
    await built.waitFor();
    expect(await built.locator('.owner').textContent()).toBe('ci-runner-7');
    expect(await built.locator('.token').textContent()).toBe(lease.token);
    expect(await page.locator('#lock-count').textContent()).toBe('1');
    expect(await page.locator('#empty').isVisible()).toBe(false);

    const ttlBefore = await built.locator('.ttl').textContent();
    await page.waitForTimeout(1_200);
    const ttlAfter = await built.locator('.ttl').textContent();
    expect(ttlBefore).toMatch(/^\d+ s$/);
    expect(ttlAfter).not.toBe(ttlBefore);

    await client.call('lock.release', { name: 'ui/build', token: lease.token });
    await built.waitFor({ state: 'detached' });
    // The feed's list comes from the server's history, read soon after the change.
    await page.locator('#feed li.released', { hasText: 'ui/build' }).waitFor();
    const feed = page.locator('#feed li');
    expect(await feed.nth(0).textContent()).toContain('released');
    expect(await feed.nth(0).textContent()).toContain('ui/build');
    expect(await feed.nth(1).textContent()).toContain('granted');
    // The page runs under its own strict CSP, WebSocket included, without a single error.
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a lock held before the page opened, shared locks, and the charts’ row read right', async () => {
    const client = await session();
    await client.call('lock.acquire', { name: 'ui/long-held', ttlMs: 60_000, owner: 'janitor' });
    const owner = 'reader-with-a-rather-long-owner-name-42';
    await client.call('lock.acquire', { name: 'ui/config', ttlMs: 60_000, owner, mode: 'shared' });
    await client.call('lock.acquire', {
      name: 'ui/gpus',
      ttlMs: 60_000,
      owner: `${owner}-gpu`,
      mode: 'shared',
      limit: 3,
    });
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    // The history (how long each lock has been held) comes late: until then the page does not
    // know, and says so, rather than "0 ms".
    let release: () => void = () => {};
    const historyHeld = new Promise<void>((resolve) => {
      release = resolve;
    });
    const { page, problems } = await openDashboard({ width: 1600, height: 900 }, '', (p) =>
      p.route('**/v1/feed?*', async (route) => {
        await historyHeld;
        await route.continue();
      }),
    );
    const held = row(page, 'ui/long-held').locator('.held');
    await held.waitFor();
    expect(await held.textContent()).toBe('—');
    release();
    await expect.poll(async () => held.textContent(), { timeout: 5_000 }).toMatch(/^\d+\.\d s$/);
    expect(Number.parseFloat((await held.textContent())!)).toBeGreaterThanOrEqual(1.2);

    // A read lock's limit is the server's maximum, which nobody set: not "1 of 10000". How a
    // lock is shared has its own line, never cut short by a long owner.
    const sharing = (name: string) => row(page, name).locator('.owner .sharing');
    expect(await sharing('ui/config').textContent()).toBe('read lock, 1 holder');
    expect(await sharing('ui/gpus').textContent()).toBe('semaphore, 1 of 3');
    for (const name of ['ui/config', 'ui/gpus']) {
      const cut = await sharing(name).evaluate((el) => el.scrollWidth - el.clientWidth);
      expect(cut, name).toBeLessThanOrEqual(0);
    }
    expect(await sharing('ui/long-held').isVisible()).toBe(false);

    // The three bar charts fill the row under the wide one: no empty fourth slot.
    const wide = (await page.locator('.chart.wide').boundingBox())!;
    const bars = await Promise.all(
      ['#wait-times', '#hold-times', '#contended'].map(
        async (id) => (await page.locator(`.chart:has(${id})`).boundingBox())!,
      ),
    );
    expect(new Set(bars.map((box) => Math.round(box.y))).size).toBe(1);
    expect(Math.abs(bars[2]!.x + bars[2]!.width - (wide.x + wide.width))).toBeLessThanOrEqual(2);
    await page.screenshot({ path: `${SHOTS}/dlm-dashboard-shared.png`, fullPage: true });
    expect(problems).toEqual([]);
    await page.close();
    for (const name of ['ui/long-held', 'ui/config', 'ui/gpus']) {
      await fetch(`${server.httpUrl}/v1/locks/${encodeURIComponent(name)}`, { method: 'DELETE' });
    }
  });

  it('a revoke from the page, by keyboard, reaches the holder as lock.lost and hands the lock on', async () => {
    const { page, problems } = await openDashboard({ width: 1200, height: 800 });
    const holder = await session();
    const waiter = await session();
    const lease = (
      await holder.call('lock.acquire', { name: 'ui/deploy', ttlMs: 60_000, owner: 'deployer' })
    ).result;
    const waiting = waiter.call('lock.acquire', {
      name: 'ui/deploy',
      ttlMs: 60_000,
      waitMs: 30_000,
      owner: 'next-in-line',
    });
    const deploy = row(page, 'ui/deploy');
    await deploy.waitFor();
    await deploy.locator('.waiters', { hasText: '1' }).waitFor();

    page.once('dialog', (dialog) => {
      expect(dialog.message()).toContain('ui/deploy');
      void dialog.accept();
    });
    await page.getByRole('button', { name: 'Revoke lock ui/deploy' }).focus();
    await page.keyboard.press('Enter');

    const lost = await holder.nextNotification('lock.lost');
    expect(lost.params).toEqual({ name: 'ui/deploy', token: lease.token, reason: 'revoked' });
    const next = (await waiting).result;
    expect(BigInt(next.token)).toBeGreaterThan(BigInt(lease.token));

    await deploy.locator('.owner', { hasText: 'next-in-line' }).waitFor();
    expect(await deploy.locator('.token').textContent()).toBe(next.token);
    expect(await deploy.locator('.waiters').textContent()).toBe('0');
    await page.locator('#feed li.revoked', { hasText: 'ui/deploy' }).waitFor();
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a lease revoked with a lock-delay stays as a delayed name, with its waiter, until the grant', async () => {
    const { page, problems } = await openDashboard({ width: 1200, height: 800 });
    const holder = await session();
    const waiter = await session();
    await holder.call('lock.acquire', {
      name: 'ui/delayed',
      ttlMs: 60_000,
      owner: 'stalled-worker',
      lockDelayMs: 3_000,
    });
    const delayed = row(page, 'ui/delayed');
    await delayed.waitFor();
    page.once('dialog', (dialog) => void dialog.accept());
    await page.getByRole('button', { name: 'Revoke lock ui/delayed' }).click();
    const revokedAt = performance.now();
    // Free, but nobody may take it yet: the row says so, counts the delay down, offers no revoke.
    await page.locator('#lock-rows tr.delayed[data-name="ui/delayed"]').waitFor();
    expect(await delayed.locator('.owner').textContent()).toBe('nobody: lock-delay');
    expect(await delayed.locator('.ttl').textContent()).toMatch(/^delay \d\.\d s$/);
    expect(await delayed.locator('.revoke').isVisible()).toBe(false);
    const waiting = waiter.call('lock.acquire', {
      name: 'ui/delayed',
      ttlMs: 60_000,
      waitMs: 30_000,
      owner: 'after-the-delay',
    });
    await delayed.locator('.waiters', { hasText: '1' }).waitFor();
    // The waiter is granted once the delay is over, and the row is a held lock again.
    await delayed.locator('.owner', { hasText: 'after-the-delay' }).waitFor();
    expect(performance.now() - revokedAt).toBeGreaterThan(2_500);
    expect((await waiting).result.owner).toBe('after-the-delay');
    expect(await delayed.getAttribute('class')).not.toContain('delayed');
    expect(await delayed.locator('.revoke').isVisible()).toBe(true);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('on a server with tokens, asks for one, keeps it for the tab, and revokes with it', async () => {
    const admin = newToken();
    const viewer = newToken();
    const guarded = await startServer({
      port: 0,
      auth: [
        { name: 'ops', sha256: hashToken(admin), actions: ['watch', 'admin', 'lock'] },
        { name: 'viewer', sha256: hashToken(viewer), actions: ['watch'], prefixes: ['team/'] },
      ],
    });
    try {
      const holder = await connect(guarded.url);
      peers.push(holder);
      await holder.hello(admin);
      const lease = (await holder.call('lock.acquire', { name: 'team/db', ttlMs: 60_000 })).result;

      const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
      const errors: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      await page.goto(`${guarded.httpUrl}/`);
      await page.locator('#auth:not([hidden])').waitFor();
      expect(await page.locator('#status').getAttribute('data-state')).toBe('error');

      await page.locator('#token').fill('not-a-token');
      await page.keyboard.press('Enter');
      await page.locator('#auth-note', { hasText: 'did not accept' }).waitFor();

      // A watch-only token on another prefix: the page says what it may not watch.
      await page.locator('#token').fill(viewer);
      await page.keyboard.press('Enter');
      await page.locator('#status', { hasText: 'may not watch' }).waitFor();
      await page.goto(`${guarded.httpUrl}/?prefix=team%2F`);
      await row(page, 'team/db').waitFor();
      // The token survived the reload (sessionStorage); revoking needs admin, which it lacks.
      page.once('dialog', (dialog) => void dialog.accept());
      await page.getByRole('button', { name: 'Revoke lock team/db' }).click();
      await page.locator('#feed li.error', { hasText: 'may not administer' }).waitFor();

      await page.evaluate(`sessionStorage.setItem('dlm-token', ${JSON.stringify(admin)})`);
      await page.reload();
      await row(page, 'team/db').waitFor();
      page.once('dialog', (dialog) => void dialog.accept());
      await page.getByRole('button', { name: 'Revoke lock team/db' }).click();
      expect((await holder.nextNotification('lock.lost')).params).toEqual({
        name: 'team/db',
        token: lease.token,
        reason: 'revoked',
      });
      await row(page, 'team/db').waitFor({ state: 'detached' });
      await page.screenshot({ path: `${SHOTS}/dlm-dashboard-token.png` });
      expect(errors).toEqual([]);
      await page.close();
    } finally {
      await guarded.close();
    }
  });

  it('filters by prefix from the keyboard, and reads on a narrow screen', async () => {
    const { page, problems } = await openDashboard({ width: 1280, height: 760 });
    // Activity after the page opened, so that the feed shows every kind of event.
    const client = await session();
    const held = [
      ['jobs/nightly-backup', 'backup@db-2', 3_600_000],
      ['jobs/reindex', 'worker-3', 120_000],
      ['payments/ledger', 'settler-1', 45_000],
      ['payments/invoices/2024-06', 'billing-7f3c', 20_000],
      ['leader/scheduler', 'sched-a', 4_000],
    ] as const;
    for (const [name, owner, ttlMs] of held) {
      await client.call('lock.acquire', { name, owner, ttlMs });
    }
    const report = (
      await client.call('lock.acquire', { name: 'reports/daily', owner: 'cron-1', ttlMs: 10_000 })
    ).result;
    await client.call('lock.release', { name: 'reports/daily', token: report.token });
    await client.call('lock.acquire', { name: 'cache/warmup', owner: 'warm-2', ttlMs: 200 });
    await client.call('lock.acquire', { name: 'migrations', owner: 'stuck-pod', ttlMs: 60_000 });
    await fetch(`${server.httpUrl}/v1/locks/migrations`, { method: 'DELETE' });
    for (let i = 0; i < 2; i += 1) {
      void (await session()).call('lock.acquire', {
        name: 'payments/ledger',
        ttlMs: 5_000,
        waitMs: 60_000,
      });
    }

    await row(page, 'leader/scheduler').waitFor();
    await row(page, 'payments/ledger').locator('.waiters', { hasText: '2' }).waitFor();
    await page.locator('#feed li.expired', { hasText: 'cache/warmup' }).waitFor();
    // `first`: on a retry the server's history still holds the first attempt's revocation.
    await page.locator('#feed li.revoked', { hasText: 'migrations' }).first().waitFor();
    await page.screenshot({ path: `${SHOTS}/dlm-dashboard.png`, fullPage: true });

    await page.keyboard.press('/');
    // Page scripts are strings: the tests are typechecked without the DOM library.
    expect(await page.evaluate('document.activeElement && document.activeElement.id')).toBe(
      'prefix',
    );
    await page.keyboard.type('payments/');
    await row(page, 'jobs/reindex').waitFor({ state: 'detached' });
    const names = await page
      .locator('#lock-rows tr')
      .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-name')));
    expect(names).toEqual(['payments/invoices/2024-06', 'payments/ledger']);
    expect(page.url()).toContain('prefix=payments%2F');
    // A lock granted under the filter shows up; one outside it does not.
    await client.call('lock.acquire', { name: 'payments/refunds', ttlMs: 30_000 });
    await client.call('lock.acquire', { name: 'jobs/other', ttlMs: 30_000 });
    await row(page, 'payments/refunds').waitFor();
    expect(await row(page, 'jobs/other').count()).toBe(0);

    await page.keyboard.press('Escape');
    await row(page, 'jobs/other').waitFor();
    await page.close();

    const narrow = await openDashboard({ width: 390, height: 844 }, '?prefix=payments%2F');
    await row(narrow.page, 'payments/ledger').waitFor();
    // Cards, not a table: the header row is hidden and nothing scrolls sideways.
    const overflow = await narrow.page.evaluate(
      'document.documentElement.scrollWidth - document.documentElement.clientWidth',
    );
    expect(overflow).toBeLessThanOrEqual(0);
    expect(await narrow.page.locator('thead').boundingBox()).toMatchObject({ height: 1 });
    await narrow.page.screenshot({ path: `${SHOTS}/dlm-dashboard-narrow.png`, fullPage: true });
    expect([...problems, ...narrow.problems]).toEqual([]);
    await narrow.page.close();
  });

  it('charts move under load, the history survives a reload, and both widths fit', async () => {
    const { page, problems } = await openDashboard({ width: 1280, height: 800 });
    const stop = await startLoad(['load/orders', 'load/stock']);
    let stopped = false;
    try {
      // The page's CSP forbids eval, so waits poll from here (vitest's expect.poll).
      const total = (on: Page) => async () => (await chartState(on)).total;
      await expect.poll(total(page), { timeout: 10_000 }).toBeGreaterThan(10);
      const before = await chartState(page);
      // Two moments under load, a few history reads apart.
      await expect.poll(total(page), { timeout: 10_000 }).toBeGreaterThan(before.total + 10);
      const after = await chartState(page);
      expect(after.lines).not.toBe(before.lines);
      expect(after.waited).toBeGreaterThan(before.waited);
      expect(after.held).toBeGreaterThan(before.held);
      expect(after.contended.slice(0, 2).sort()).toEqual(['load/orders', 'load/stock']);
      // Per lock: how long it has been held, and how long each of its waiters has waited.
      const orders = row(page, 'load/orders');
      // A wait under load is some ms, or a few seconds on a slow machine.
      await orders.locator('.wait-times', { hasText: /\d+ ms|\d+\.\d s/ }).waitFor();
      expect(await orders.locator('.held').textContent()).toMatch(/^\d+ ms$|^\d+\.\d s$/);
      const legend = await page.locator('#rate-legend li').allTextContents();
      expect(legend.map((text) => text.replace(/^\d+ /, ''))).toEqual([
        'grants/s',
        'releases/s',
        'expiries/s',
        'queued/s',
      ]);
      await page.screenshot({ path: `${SHOTS}/dlm-dashboard-charts.png`, fullPage: true });

      await stop();
      stopped = true;
      // A new page load starts from the server's ring: the events before it, charts included.
      await page.reload();
      await page.locator('#status[data-state="live"]').waitFor();
      await expect.poll(total(page), { timeout: 10_000 }).toBeGreaterThan(0);
      const reloaded = await chartState(page);
      expect(reloaded.total).toBeGreaterThanOrEqual(after.total);
      expect(reloaded.held).toBeGreaterThanOrEqual(after.held);
      expect(reloaded.feed).toBeGreaterThan(20);
      await page.locator('#feed li.expired', { hasText: 'load/lapse-' }).first().waitFor();
      expect(reloaded.contended.slice(0, 2).sort()).toEqual(['load/orders', 'load/stock']);

      const phone = await openDashboard({ width: 390, height: 844 });
      await expect.poll(total(phone.page), { timeout: 10_000 }).toBeGreaterThan(0);
      const overflow = await phone.page.evaluate(
        'document.documentElement.scrollWidth - document.documentElement.clientWidth',
      );
      expect(overflow).toBeLessThanOrEqual(0);
      await phone.page.screenshot({ path: `${SHOTS}/dlm-dashboard-charts-phone.png` });
      await phone.page.screenshot({
        path: `${SHOTS}/dlm-dashboard-charts-phone-full.png`,
        fullPage: true,
      });
      expect([...problems, ...phone.problems]).toEqual([]);
      await phone.page.close();
    } finally {
      if (!stopped) await stop();
      await page.close();
    }
  }, 60_000);
});
