// The dlm dashboard: held locks and a live feed, kept up to date over the WebSocket protocol
// (lock.watchPrefix). No build step and no dependencies: this file is served as it is.

const SUBPROTOCOL = 'dlm.v1.json';
const FEED_LIMIT = 200;
const FEED_EVENTS = new Set(['acquired', 'released', 'expired', 'revoked']);
const FEED_LABELS = {
  acquired: 'granted',
  released: 'released',
  expired: 'expired',
  revoked: 'revoked',
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

// With tokens configured the server wants one in session.hello (browsers cannot set headers on
// a WebSocket) and in the admin API's Authorization header. It lives in this tab's
// sessionStorage: gone when the tab closes, never sent anywhere but this server.
const TOKEN_KEY = 'dlm-token';
let token = sessionStorage.getItem(TOKEN_KEY) ?? '';
/** Set when the server refused the token: wait for a new one instead of reconnecting. */
let awaitingToken = false;

/** name -> { name, owner, token, expiresAt (performance.now() ms), waiters, row, cells } */
const locks = new Map();

let socket;
let nextId = 1;
const pending = new Map();
let watchId;
let prefix = new URLSearchParams(location.search).get('prefix') ?? '';
let reconnectDelayMs = 500;
let serverInfo = '';

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
  for (const lock of result.locks) upsert(lock);
  render();
  setStatus('live', `Live · ${serverInfo}`);
}

// ---- state -------------------------------------------------------------------------------

function applyChange(change) {
  const lock = locks.get(change.name);
  switch (change.event) {
    case 'acquired':
    case 'extended':
      upsert(change);
      break;
    case 'released':
    case 'expired':
    case 'revoked':
      if (lock && (change.token === undefined || change.token === lock.token)) {
        lock.row.remove();
        locks.delete(change.name);
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
  if (FEED_EVENTS.has(change.event)) addFeedItem(change);
  render();
}

function upsert(info) {
  let lock = locks.get(info.name);
  if (!lock) {
    lock = { name: info.name };
    locks.set(info.name, lock);
    createRow(lock);
  }
  lock.owner = info.owner;
  lock.token = info.token;
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
  const token = cell('Token', 'num token');
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
  row.append(name, owner, token, ttl, waiters, actions);
  lock.row = row;
  lock.cells = { name, owner, token, ttl, waiters };
  name.textContent = lock.name;
  // Keep the rows sorted by name.
  const after = [...locks.keys()].filter((other) => other > lock.name).sort()[0];
  const before = after === undefined ? null : locks.get(after).row;
  rows.insertBefore(row, before ?? null);
}

function fillRow(lock) {
  lock.cells.owner.textContent = lock.owner;
  lock.cells.owner.title = lock.owner;
  lock.cells.token.textContent = lock.token;
  lock.cells.waiters.textContent = String(lock.waiters);
  lock.cells.waiters.classList.toggle('busy', lock.waiters > 0);
  paintTtl(lock, performance.now());
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

function paintTtl(lock, now) {
  if (lock.expiresAt === undefined) return;
  const left = lock.expiresAt - now;
  lock.cells.ttl.textContent = formatDuration(left);
  lock.cells.ttl.classList.toggle('low', left < 5_000);
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

function addFeedItem(change) {
  const item = document.createElement('li');
  item.className = `event ${change.event}`;
  const time = document.createElement('time');
  const now = new Date();
  time.dateTime = now.toISOString();
  time.textContent = now.toLocaleTimeString([], { hour12: false });
  const kind = document.createElement('span');
  kind.className = 'kind';
  kind.textContent = FEED_LABELS[change.event] ?? change.event;
  const name = document.createElement('span');
  name.className = 'name';
  name.textContent = change.name;
  const detail = document.createElement('span');
  detail.className = 'detail';
  const parts = [];
  if (change.owner) parts.push(change.owner);
  if (change.token) parts.push(`token ${change.token}`);
  if (change.event === 'acquired' && change.ttlRemainingMs !== undefined)
    parts.push(`ttl ${formatDuration(change.ttlRemainingMs)}`);
  detail.textContent = parts.join(' · ');
  item.append(time, kind, name, detail);
  feedList.prepend(item);
  while (feedList.children.length > FEED_LIMIT) feedList.lastElementChild.remove();
}

function feedNote(text, kind = 'note') {
  addFeedItem({ event: kind, name: text });
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
  for (const lock of locks.values()) paintTtl(lock, now);
}, 250);

render();
connect();
