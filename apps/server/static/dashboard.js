// The dlm dashboard: held locks, kept up to date over the WebSocket protocol (lock.watchPrefix),
// and the server's recent past (GET /v1/feed): the live feed and the charts, which therefore
// survive a reload. No build step and no dependencies: this file is served as it is.

import { drawContended, drawDurations, drawRates } from './charts.js';

const SUBPROTOCOL = 'dlm.v1.json';
const FEED_LIMIT = 200;
const FEED_EVENTS = new Set(['acquired', 'released', 'expired', 'revoked', 'releaseRequested']);
/** How often the charts ask for what happened since they last asked. */
const HISTORY_POLL_MS = 1_000;
/** A change on the WebSocket asks for the history sooner, but not more often than this. */
const HISTORY_SOON_MS = 150;
const FEED_LABELS = {
  acquired: 'granted',
  released: 'released',
  expired: 'expired',
  revoked: 'revoked',
  releaseRequested: 'asked to release',
};

const $ = (id) => document.getElementById(id);
const statusLine = $('status');
const prefixInput = $('prefix');
const rows = $('lock-rows');
const emptyNote = $('empty');
const lockCount = $('lock-count');
const feedList = $('feed');
const authForm = $('auth');
const authNote = $('auth-note');
const tokenInput = $('token');
const chart = {
  rates: $('rates'),
  scale: $('rate-scale'),
  legend: $('rate-legend'),
  waits: $('wait-times'),
  holds: $('hold-times'),
  contended: $('contended'),
  note: $('history-note'),
};

// With tokens configured the server wants one in session.hello (browsers cannot set headers on
// a WebSocket) and in the admin API's Authorization header. It lives in this tab's
// sessionStorage: gone when the tab closes, never sent anywhere but this server.
const TOKEN_KEY = 'dlm-token';
let token = sessionStorage.getItem(TOKEN_KEY) ?? '';
/** Set when the server refused the token: wait for a new one instead of reconnecting. */
let awaitingToken = false;

/**
 * name -> { name, owner, token, expiresAt (performance.now() ms), waiters, row, cells }; a name
 * in its lock-delay (free, nobody may take it yet) has `delayedUntil` (performance.now() ms).
 */
const locks = new Map();

let socket;
let nextId = 1;
const pending = new Map();
let watchId;
let prefix = new URLSearchParams(location.search).get('prefix') ?? '';
let reconnectDelayMs = 500;
let serverInfo = '';
/**
 * The server's most shared holders of one name (session.hello): a shared lock asked for without
 * a limit (a read lock) gets it as its limit, which no one set and is not worth showing.
 */
let maxHolders;

/**
 * What GET /v1/feed told, for the prefix `recent.prefix`: its events (oldest first, `at` on
 * performance.now()), the per-second rates, and per name when its lease began and when each
 * waiter queued (performance.now() ms).
 */
const recent = { prefix: undefined, seq: 0, events: [], rates: undefined, activity: new Map() };
let historyTimer;
let historyDueAt = 0;
let historyBusy = false;
let historyAgain = false;
/** Whether the session is live: history is read only then (a refused token would flood logs). */
let historyOn = false;

prefixInput.value = prefix;

// ---- protocol ----------------------------------------------------------------------------

function call(method, params) {
  return new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    socket.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
  });
}

/** Shows the token form; the next connection waits for it. */
function askForToken(note) {
  awaitingToken = true;
  authNote.textContent = note;
  authForm.hidden = false;
  tokenInput.focus();
  setStatus('error', 'Needs a token');
}

authForm.addEventListener('submit', (event) => {
  event.preventDefault();
  token = tokenInput.value.trim();
  tokenInput.value = '';
  sessionStorage.setItem(TOKEN_KEY, token);
  authForm.hidden = true;
  awaitingToken = false;
  if (socket && socket.readyState !== WebSocket.CLOSED) socket.close();
  else connect();
});

function connect() {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  socket = new WebSocket(`${scheme}//${location.host}/v1/ws`, SUBPROTOCOL);
  socket.addEventListener('open', async () => {
    try {
      const hello = await call('session.hello', {
        client: { name: 'dlm-dashboard', version: '1' },
        ...(token ? { auth: token } : {}),
      });
      reconnectDelayMs = 500;
      serverInfo = `${hello.backend} backend · dlm ${hello.server.version}`;
      maxHolders = hello.limits?.maxHolders;
      await watch(prefix);
    } catch (error) {
      if (error.code === 'UNAUTHENTICATED') {
        askForToken(
          token
            ? 'The server did not accept that token. Paste another one.'
            : 'Paste a token with watch (and admin to revoke). It is kept in this tab only.',
        );
      } else if (error.code === 'FORBIDDEN') {
        setStatus('error', `This token may not watch “${prefix}”: filter by one of its prefixes`);
      } else {
        setStatus('error', `Could not start: ${error.message}`);
      }
    }
  });
  socket.addEventListener('message', (message) => onFrame(JSON.parse(message.data)));
  socket.addEventListener('close', () => {
    for (const { reject } of pending.values()) reject(new Error('connection closed'));
    pending.clear();
    watchId = undefined;
    stopHistory();
    if (awaitingToken) return;
    setStatus(
      'offline',
      `Disconnected; reconnecting in ${Math.round(reconnectDelayMs / 100) / 10} s…`,
    );
    setTimeout(connect, reconnectDelayMs);
    reconnectDelayMs = Math.min(reconnectDelayMs * 2, 10_000);
  });
}

function onFrame(frame) {
  if (frame.id !== undefined && frame.id !== null) {
    const waiter = pending.get(frame.id);
    if (!waiter) return;
    pending.delete(frame.id);
    if (frame.error) {
      const error = new Error(frame.error.message);
      error.code = frame.error.data?.code;
      waiter.reject(error);
    } else waiter.resolve(frame.result);
    return;
  }
  if (frame.method === 'lock.changed' && frame.params.watchId === watchId) {
    applyChange(frame.params);
  }
}

/** Starts watching `newPrefix`; the table is replaced by its snapshot. */
async function watch(newPrefix) {
  const previous = watchId;
  watchId = undefined;
  if (previous) call('lock.unwatch', { watchId: previous }).catch(() => {});
  const result = await call('lock.watchPrefix', { prefix: newPrefix });
  if (newPrefix !== prefix) {
    // The filter changed again while this watch was being set up.
    call('lock.unwatch', { watchId: result.watchId }).catch(() => {});
    return;
  }
  watchId = result.watchId;
  for (const lock of locks.values()) lock.row.remove();
  locks.clear();
  // Held before this page looked: since when, the history says (until then, a dash).
  for (const lock of result.locks) upsert(lock, false);
  render();
  setStatus('live', `Live · ${serverInfo}`);
  startHistory();
}

// ---- state -------------------------------------------------------------------------------

function applyChange(change) {
  const lock = locks.get(change.name);
  switch (change.event) {
    case 'acquired':
      upsert(change, true);
      break;
    case 'extended':
      upsert(change, false);
      break;
    case 'released':
    case 'expired':
    case 'revoked':
      if (lock && change.held && change.holders > 0) {
        // One of several shared holders ended; the others hold on.
        lock.holders = change.holders;
        fillRow(lock);
      } else if (
        lock &&
        (change.token === undefined || change.token === lock.token || !change.held)
      ) {
        lock.row.remove();
        locks.delete(change.name);
        // An expiry or a revocation may start the lease's lock-delay: the server knows.
        if (change.event !== 'released') showIfDelayed(change.name);
      }
      break;
    case 'waiters':
      if (lock) {
        lock.waiters = change.waiters;
        fillRow(lock);
      }
      break;
    default:
      return;
  }
  // The feed's list and the charts come from the server's history, which this change is in.
  if (FEED_EVENTS.has(change.event) || change.event === 'waiters') readHistorySoon();
  render();
}

/**
 * Asks the server whether `name` is in its lock-delay (lock.get: `held: false` with
 * `lockDelayRemainingMs`) and shows it as a delayed row until the delay is over or a grant.
 */
async function showIfDelayed(name) {
  let state;
  try {
    state = await call('lock.get', { name });
  } catch {
    return; // Not allowed to read it, or the connection went: nothing to show.
  }
  if (state.held || !(state.lockDelayRemainingMs > 0) || locks.has(name)) return;
  const lock = { name, owner: '', token: '', mode: 'exclusive', holders: 0 };
  lock.waiters = state.waiters ?? 0;
  lock.delayedUntil = performance.now() + state.lockDelayRemainingMs;
  locks.set(name, lock);
  createRow(lock);
  fillRow(lock);
  render();
}

/** Shows `info` (a held lock, or a change); `granted`: its lease was granted just now. */
function upsert(info, granted) {
  let lock = locks.get(info.name);
  if (!lock) {
    lock = { name: info.name };
    locks.set(info.name, lock);
    createRow(lock);
  }
  // Granted: its lock-delay, if it was in one, is over.
  lock.delayedUntil = undefined;
  // A lease granted now is held from now until the history says; one held before the page
  // saw it, since an unknown time (a dash, not "0 ms").
  if (info.token !== lock.token) lock.heldSince = granted ? performance.now() : undefined;
  // The highest token's holder is shown; a shared lock says how many hold it, of its limit.
  if (lock.token === undefined || BigInt(info.token) >= BigInt(lock.token)) {
    lock.owner = info.owner;
    lock.token = info.token;
  }
  lock.mode = info.mode ?? 'exclusive';
  if (info.limit !== undefined) lock.limit = info.limit;
  if (Array.isArray(info.holders)) lock.holders = info.holders.length;
  else if (typeof info.holders === 'number') lock.holders = info.holders;
  else lock.holders = 1;
  lock.waiters = info.waiters ?? lock.waiters ?? 0;
  if (info.ttlRemainingMs !== undefined) lock.expiresAt = performance.now() + info.ttlRemainingMs;
  fillRow(lock);
}

// ---- rendering ---------------------------------------------------------------------------

function cell(label, className) {
  const td = document.createElement('td');
  td.dataset.label = label;
  if (className) td.className = className;
  return td;
}

function createRow(lock) {
  const row = document.createElement('tr');
  row.dataset.name = lock.name;
  const name = cell('Name', 'name');
  const owner = cell('Holder', 'owner');
  // The holder's name may be cut short; how the lock is shared, on its own line, never is.
  const who = document.createElement('span');
  who.className = 'who';
  const sharing = document.createElement('span');
  sharing.className = 'sharing';
  owner.append(who, sharing);
  const token = cell('Token', 'num token');
  const held = cell('Held for', 'num held');
  const ttl = cell('TTL left', 'num ttl');
  const waiters = cell('Waiters', 'num waiters');
  const actions = cell('', 'actions');
  const revoke = document.createElement('button');
  revoke.type = 'button';
  revoke.className = 'revoke';
  revoke.textContent = 'Revoke';
  revoke.setAttribute('aria-label', `Revoke lock ${lock.name}`);
  revoke.addEventListener('click', () => revokeLock(lock));
  actions.append(revoke);
  const count = document.createElement('span');
  count.className = 'n';
  const waitTimes = document.createElement('span');
  waitTimes.className = 'wait-times';
  waiters.append(count, waitTimes);
  row.append(name, owner, token, held, ttl, waiters, actions);
  lock.row = row;
  lock.cells = { name, owner, who, sharing, token, held, ttl, waiters, count, waitTimes, revoke };
  name.textContent = lock.name;
  // Keep the rows sorted by name.
  const after = [...locks.keys()].filter((other) => other > lock.name).sort()[0];
  const before = after === undefined ? null : locks.get(after).row;
  rows.insertBefore(row, before ?? null);
}

/** How a shared lock is held: `read lock, 2 holders` or `semaphore, 1 of 3`. */
function sharingOf(lock) {
  const holders = `${lock.holders} holder${lock.holders === 1 ? '' : 's'}`;
  if (lock.limit === undefined || lock.limit === maxHolders) return `read lock, ${holders}`;
  return `semaphore, ${lock.holders} of ${lock.limit}`;
}

function fillRow(lock) {
  const shared = lock.mode === 'shared';
  const delayed = lock.delayedUntil !== undefined;
  // In its lock-delay nobody holds it, and there is nothing to revoke.
  lock.row.classList.toggle('delayed', delayed);
  lock.cells.revoke.hidden = delayed;
  lock.cells.who.textContent = delayed ? 'nobody: lock-delay' : lock.owner;
  lock.cells.sharing.textContent = shared ? sharingOf(lock) : '';
  lock.cells.sharing.hidden = !shared;
  lock.cells.owner.title = shared ? `${sharingOf(lock)}; newest: ${lock.owner}` : lock.owner;
  lock.cells.token.textContent = lock.token;
  lock.cells.count.textContent = String(lock.waiters);
  lock.cells.waiters.classList.toggle('busy', lock.waiters > 0);
  paintTimes(lock, performance.now());
}

function formatDuration(ms) {
  if (ms <= 0) return 'expiring';
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.ceil(ms / 1000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} m ${String(seconds % 60).padStart(2, '0')} s`;
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, '0')} m`;
}

/** How long something has lasted: `340 ms`, `4.1 s`, `2 m 05 s`. */
function formatElapsed(ms) {
  if (ms < 1_000) return `${Math.max(0, Math.round(ms))} ms`;
  return formatDuration(ms);
}

/**
 * The TTL left (or the lock-delay left), how long the lease has been held, and how long each
 * waiter has waited. A name whose lock-delay is over leaves the table.
 */
function paintTimes(lock, now) {
  if (lock.delayedUntil !== undefined) {
    const left = lock.delayedUntil - now;
    if (left <= 0) {
      lock.row.remove();
      locks.delete(lock.name);
      render();
      return;
    }
    lock.cells.ttl.textContent = `delay ${formatDuration(left)}`;
    lock.cells.ttl.classList.remove('low');
    lock.cells.ttl.title = 'Lock-delay left: nobody is granted the name before it is over';
  } else if (lock.expiresAt !== undefined) {
    lock.cells.ttl.title = '';
    const left = lock.expiresAt - now;
    lock.cells.ttl.textContent = formatDuration(left);
    lock.cells.ttl.classList.toggle('low', left < 5_000);
  }
  const activity = recent.activity.get(lock.name);
  const heldSince = activity?.token === lock.token ? activity.heldSince : lock.heldSince;
  lock.cells.held.textContent = heldSince === undefined ? '—' : formatElapsed(now - heldSince);
  // The server counts waiters off the oldest first (it hears only the queue's length).
  const since = (activity?.waitingSince ?? []).slice(0, lock.waiters);
  const shown = since.slice(0, 3).map((at) => formatElapsed(now - at));
  if (since.length > 3) shown.push(`+${since.length - 3}`);
  lock.cells.waitTimes.textContent = shown.length ? shown.join(', ') : '';
  lock.cells.waitTimes.title = shown.length ? 'How long each waiter has waited, oldest first' : '';
}

function render() {
  lockCount.textContent = String(locks.size);
  emptyNote.hidden = locks.size > 0;
  emptyNote.textContent = prefix ? `No locks held under “${prefix}”.` : 'No locks held.';
}

function setStatus(state, text) {
  statusLine.dataset.state = state;
  statusLine.textContent = text;
}

/** Adds `change` (a history event, or a note of the page's own) to the top of the feed. */
function addFeedItem(change) {
  const item = document.createElement('li');
  item.className = `event ${change.type}`;
  const time = document.createElement('time');
  const now = new Date(Date.now() - (performance.now() - (change.at ?? performance.now())));
  time.dateTime = now.toISOString();
  time.textContent = now.toLocaleTimeString([], { hour12: false });
  const kind = document.createElement('span');
  kind.className = 'kind';
  kind.textContent = FEED_LABELS[change.type] ?? change.type;
  const name = document.createElement('span');
  name.className = 'name';
  name.textContent = change.name;
  const detail = document.createElement('span');
  detail.className = 'detail';
  const parts = [];
  if (change.owner) parts.push(change.owner);
  if (change.token) parts.push(`token ${change.token}`);
  if (change.waitedMs > 0) parts.push(`waited ${formatElapsed(change.waitedMs)}`);
  if (change.heldMs !== undefined) parts.push(`held ${formatElapsed(change.heldMs)}`);
  detail.textContent = parts.join(' · ');
  item.append(time, kind, name, detail);
  feedList.prepend(item);
  while (feedList.children.length > FEED_LIMIT) feedList.lastElementChild.remove();
}

function feedNote(text, kind = 'note') {
  addFeedItem({ type: kind, name: text });
}

// ---- history and charts ------------------------------------------------------------------

function startHistory() {
  historyOn = true;
  readHistorySoon(0);
}

function stopHistory() {
  historyOn = false;
  clearTimeout(historyTimer);
  historyTimer = undefined;
}

/** Reads the history in `delayMs`, or sooner if a read is due sooner: never later. */
function readHistorySoon(delayMs = HISTORY_SOON_MS) {
  if (!historyOn) return;
  if (historyBusy) {
    historyAgain = true;
    return;
  }
  const dueAt = performance.now() + delayMs;
  if (historyTimer !== undefined && historyDueAt <= dueAt) return;
  scheduleHistory(delayMs);
}

function scheduleHistory(delayMs) {
  clearTimeout(historyTimer);
  historyDueAt = performance.now() + delayMs;
  historyTimer = setTimeout(readHistory, delayMs);
}

async function readHistory() {
  historyTimer = undefined;
  historyBusy = true;
  const asked = prefix;
  if (asked !== recent.prefix) {
    // A new filter: its own history, read from the start.
    Object.assign(recent, { prefix: asked, seq: 0, events: [], activity: new Map() });
    feedList.replaceChildren();
  }
  try {
    const query = new URLSearchParams({ prefix: asked, after: String(recent.seq) });
    const response = await fetch(`/v1/feed?${query}`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });
    const body = await response.json();
    if (!response.ok)
      chart.note.textContent = `History: ${body.error?.message ?? response.statusText}`;
    else if (asked === prefix) applyHistory(body);
  } catch (error) {
    chart.note.textContent = `History: ${error.message}`;
  } finally {
    historyBusy = false;
    const delayMs = historyAgain ? HISTORY_SOON_MS : HISTORY_POLL_MS;
    historyAgain = false;
    if (historyOn) scheduleHistory(delayMs);
  }
}

function applyHistory(body) {
  const now = performance.now();
  if (body.seq < recent.seq) {
    // The server restarted: its history began again.
    recent.events = [];
    feedList.replaceChildren();
  }
  const shown = [];
  for (const event of body.events) {
    const entry = { ...event, at: now - event.ageMs };
    recent.events.push(entry);
    if (FEED_EVENTS.has(entry.type)) shown.push(entry);
  }
  // A first read brings the whole ring: only the newest can stay in the list.
  for (const entry of shown.slice(-FEED_LIMIT)) addFeedItem(entry);
  recent.seq = body.seq;
  const { events } = recent;
  let drop = Math.max(0, events.length - body.maxEvents);
  while (drop < events.length && now - events[drop].at > body.maxAgeMs) drop += 1;
  events.splice(0, drop);
  recent.rates = body.rates;
  recent.activity = new Map(
    body.locks.map((lock) => [
      lock.name,
      {
        token: lock.token,
        heldSince: lock.heldMs === undefined ? undefined : now - lock.heldMs,
        waitingSince: lock.waitingMs.map((ms) => now - ms),
      },
    ]),
  );
  const oldest = events[0];
  chart.note.textContent = `The server keeps the last ${body.maxEvents.toLocaleString()} events or ${Math.round(body.maxAgeMs / 60_000)} minutes${oldest ? `; this view goes back ${formatElapsed(now - oldest.at)}` : ''}.`;
  drawCharts();
  for (const lock of locks.values()) paintTimes(lock, now);
}

function drawCharts() {
  if (recent.rates) drawRates(chart.rates, chart.scale, chart.legend, recent.rates);
  const waited = [];
  const held = [];
  const byName = new Map();
  const named = (name) => {
    let row = byName.get(name);
    if (!row) {
      row = { name, waits: 0, waitedMs: 0, waiting: 0 };
      byName.set(name, row);
    }
    return row;
  };
  for (const event of recent.events) {
    if (event.type === 'queued') named(event.name).waits += 1;
    else if (event.type === 'acquired' && event.waitedMs !== undefined) {
      waited.push(event.waitedMs);
      if (event.waitedMs > 0) named(event.name).waitedMs += event.waitedMs;
    } else if (event.heldMs !== undefined) held.push(event.heldMs);
  }
  for (const [name, activity] of recent.activity) {
    if (activity.waitingSince.length) named(name).waiting = activity.waitingSince.length;
  }
  drawDurations(chart.waits, waited);
  drawDurations(chart.holds, held);
  drawContended(chart.contended, byName.values(), formatElapsed);
}

// ---- actions -----------------------------------------------------------------------------

async function revokeLock(lock) {
  if (!confirm(`Revoke lock “${lock.name}” held by ${lock.owner} (token ${lock.token})?`)) return;
  try {
    const response = await fetch(`/v1/locks/${encodeURIComponent(lock.name)}`, {
      method: 'DELETE',
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      feedNote(`revoke ${lock.name}: ${body.error?.message ?? response.statusText}`, 'error');
    }
  } catch (error) {
    feedNote(`revoke ${lock.name}: ${error.message}`, 'error');
  }
}

let filterTimer;
prefixInput.addEventListener('input', () => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => {
    prefix = prefixInput.value;
    const url = new URL(location.href);
    if (prefix) url.searchParams.set('prefix', prefix);
    else url.searchParams.delete('prefix');
    history.replaceState(null, '', url);
    if (socket?.readyState === WebSocket.OPEN && serverInfo) {
      readHistorySoon(0);
      watch(prefix).catch((error) =>
        setStatus(
          'error',
          error.code === 'FORBIDDEN'
            ? `This token may not watch “${prefix}”`
            : `Filter failed: ${error.message}`,
        ),
      );
    }
  }, 200);
});

prefixInput.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && prefixInput.value) {
    prefixInput.value = '';
    prefixInput.dispatchEvent(new Event('input'));
  }
});

document.addEventListener('keydown', (event) => {
  const typing = event.target instanceof HTMLInputElement;
  if (event.key === '/' && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
    event.preventDefault();
    prefixInput.focus();
    prefixInput.select();
  }
});

// Remaining TTLs count down locally from what the server last said; this repaints the
// numbers, it does not ask the server anything.
setInterval(() => {
  const now = performance.now();
  for (const lock of locks.values()) paintTimes(lock, now);
}, 250);

render();
connect();
