// Ferroute's dashboard: reads the health and admin APIs with the admin key (kept in this tab's
// session storage, sent as a header, never a cookie) and redraws when the event stream says
// something changed. Everything is written with textContent: nothing the gateway reports (ids,
// model names, error codes) can become markup.
'use strict';

const $ = (id) => document.getElementById(id);
const KEY = 'ferroute-admin-key';
let key = sessionStorage.getItem(KEY);
let health = null;
let redraw = null;
let stream = null;

async function api(method, path, body) {
  const headers = { 'x-ferroute-admin-key': key || '' };
  const init = { method, headers };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  let data = null;
  try { data = await r.json(); } catch (_) { data = null; }
  return { status: r.status, data };
}

function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) {
    const td = document.createElement('td');
    if (c instanceof Node) td.appendChild(c); else td.textContent = c == null ? '' : String(c);
    tr.appendChild(td);
  }
  return tr;
}

function button(text, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.addEventListener('click', onClick);
  return b;
}

function seconds(ms) { return ms > 0 ? Math.ceil(ms / 1000) + ' s' : ''; }

function drawProviders() {
  const body = $('providers').tBodies[0];
  const now = Date.now();
  body.replaceChildren(...health.providers.map((p) => {
    const left = p.state === 'OPEN' ? p.retry_after_ms - (now - health.fetched) : 0;
    const tr = row([p.id, p.class, p.state, p.failures, seconds(left), '']);
    tr.dataset.provider = p.id;
    tr.children[2].className = 'state-' + p.state.toLowerCase();
    return tr;
  }));
  const by = {};
  for (const c of health.connections) by[c.status] = (by[c.status] || 0) + 1;
  $('connection-summary').textContent = 'Connections: ' +
    Object.keys(by).sort().map((s) => by[s] + ' ' + s).join(', ');
}

function drawConnections() {
  const breaker = {};
  for (const p of health.providers) breaker[p.id] = p.state;
  const locks = {};
  for (const l of health.model_lockouts) (locks[l.connection] = locks[l.connection] || []).push(l.model);
  const loads = {};
  if (overview) for (const x of overview.connections) loads[x.id] = x;
  $('connections-table').tBodies[0].replaceChildren(...health.connections.map((c) => {
    const load = loads[c.id] || {};
    const said = load.last_error ? load.last_error.status + ' ' + load.last_error.message : null;
    const err = [c.last_error_type, c.last_error_code, said].filter((x) => x != null).join(' ');
    const lane = c.usage_limit ? c.usage_limit.lane : '';
    const clear = (locks[c.id] || []).length
      ? button('Re-enable models', () => reenable({ provider: c.provider, connection: c.id })) : '';
    const tr = row([c.id, c.provider, breaker[c.provider], c.status, c.backoff_level,
      c.rate_limited_until || '', err, (locks[c.id] || []).join(', '), lane,
      load.in_flight, load.queued, load.pins, clear]);
    tr.dataset.connection = c.id;
    return tr;
  }));
}

function drawLockouts() {
  const items = health.model_lockouts;
  $('lockouts-empty').hidden = items.length > 0;
  $('lockouts').tBodies[0].replaceChildren(...items.map((l) => {
    const tr = row([l.provider, l.connection, l.model, l.reason, l.expires_at,
      button('Re-enable', () => reenable(l))]);
    tr.dataset.lockout = l.provider + '/' + l.connection + '/' + l.model;
    return tr;
  }));
}

function drawFlags() {
  const e = health.emergency_fallback;
  $('emergency-target').textContent = e.target || '(none configured)';
  $('emergency').checked = !!e.enabled;
  $('emergency').disabled = !e.target;
}

async function refresh() {
  const r = await api('GET', '/api/monitoring/health');
  if (r.status !== 200 || !r.data) return;
  health = r.data;
  health.fetched = Date.now();
  await refreshOverview();
  drawProviders();
  drawConnections();
  drawLockouts();
  drawFlags();
  // When the page last finished drawing (ms after navigation), for the render-time check.
  document.body.dataset.drawnMs = String(Math.round(performance.now()));
}

async function resetAll() {
  const r = await api('POST', '/api/resilience/reset');
  $('reset-error').textContent = r.status === 200 ? '' : (r.data && r.data.error ? r.data.error.message : 'failed');
  refresh();
}

function soon() {
  if (redraw) return;
  redraw = setTimeout(() => { redraw = null; refresh(); }, 150);
}

async function reenable(l) {
  const which = { provider: l.provider, connection: l.connection };
  if (l.model) which.model = l.model;
  const r = await api('DELETE', '/api/resilience/model-cooldowns', which);
  $('lockouts-error').textContent = r.status === 200 ? '' : (r.data && r.data.error ? r.data.error.message : 'failed');
  refresh();
}

const LOCKOUT_FIELDS = ['enabled', 'error_codes', 'base_cooldown_ms', 'max_cooldown_ms', 'max_backoff_steps', 'use_exponential_backoff'];

async function loadSettings() {
  const r = await api('GET', '/api/resilience/settings');
  if (r.status !== 200 || !r.data) return;
  const m = r.data.effective.model_lockout;
  for (const f of LOCKOUT_FIELDS) {
    const input = $('lockout-' + f);
    if (input.type === 'checkbox') input.checked = !!m[f];
    else input.value = Array.isArray(m[f]) ? m[f].join(', ') : m[f];
  }
  const overridden = overriddenPaths(r.data.overrides, [], []);
  drawOtherSettings(r.data.effective, r.data.overrides);
  $('settings-status').textContent = overridden.length
    ? 'Overridden at runtime: ' + overridden.join(', ') : 'As in the config file.';
}

function clearErrors() {
  for (const s of document.querySelectorAll('#lockout-form .error')) s.textContent = '';
  $('settings-error').textContent = '';
}

async function saveSettings(ev) {
  ev.preventDefault();
  clearErrors();
  const patch = {};
  for (const f of LOCKOUT_FIELDS) {
    const input = $('lockout-' + f);
    if (input.type === 'checkbox') patch[f] = input.checked;
    else if (f === 'error_codes') patch[f] = input.value.split(',').map((s) => s.trim()).filter((s) => s).map(Number);
    else patch[f] = input.value === '' ? null : Number(input.value);
  }
  const r = await api('PATCH', '/api/resilience/settings', { model_lockout: patch });
  if (r.status === 200) {
    await loadSettings();
    return;
  }
  const problems = (r.data && r.data.error && r.data.error.problems) || [];
  let placed = false;
  for (const p of problems) {
    const field = String(p.field).split('.').pop();
    const slot = document.querySelector('#lockout-form .error[data-for="' + CSS.escape(field) + '"]');
    if (slot) { slot.textContent = p.message; placed = true; }
  }
  if (!placed) $('settings-error').textContent = r.data && r.data.error ? r.data.error.message : 'refused';
}

async function resetSettings() {
  clearErrors();
  await api('DELETE', '/api/resilience/settings');
  loadSettings();
}

async function switchEmergency() {
  const r = await api('POST', '/api/resilience/emergency-fallback', { enabled: $('emergency').checked });
  $('flags-error').textContent = r.status === 200 ? '' : (r.data && r.data.error ? r.data.error.message : 'failed');
  refresh();
}

// The event stream, read with fetch (EventSource cannot send the admin key as a header).
async function listen() {
  let after = null;
  for (;;) {
    const ctrl = new AbortController();
    stream = ctrl;
    try {
      const headers = { 'x-ferroute-admin-key': key || '' };
      if (after !== null) headers['last-event-id'] = String(after);
      const r = await fetch('/api/monitoring/events', { headers, signal: ctrl.signal });
      if (r.status !== 200) throw new Error('status ' + r.status);
      $('live').textContent = 'live';
      $('live').className = 'badge on';
      const reader = r.body.getReader();
      const text = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += text.decode(value, { stream: true });
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const id = /^id: (\d+)$/m.exec(event);
          if (id) after = Number(id[1]);
          if (/^event: /m.test(event)) soon();
        }
      }
    } catch (_) {
      if (stream !== ctrl) return;
    }
    $('live').textContent = 'offline';
    $('live').className = 'badge';
    if (stream !== ctrl || !key) return;
    await new Promise((done) => setTimeout(done, 2000));
  }
}

async function login(ev) {
  if (ev) ev.preventDefault();
  if (!key) key = $('key').value.trim();
  const r = await api('GET', '/api/resilience/settings');
  if (r.status !== 200) {
    $('login-error').textContent = r.data && r.data.error ? r.data.error.message : 'the gateway refused the key';
    sessionStorage.removeItem(KEY);
    key = null;
    return;
  }
  sessionStorage.setItem(KEY, key);
  $('login-error').textContent = '';
  $('login').hidden = true;
  $('app').hidden = false;
  $('logout').hidden = false;
  await refresh();
  await loadSettings();
  listen();
}

function logout() {
  sessionStorage.removeItem(KEY);
  key = null;
  if (stream) stream.abort();
  stream = null;
  $('app').hidden = true;
  $('logout').hidden = true;
  $('login').hidden = false;
}

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', logout);
  $('lockout-form').addEventListener('submit', saveSettings);
  $('settings-reset').addEventListener('click', resetSettings);
  $('emergency').addEventListener('change', switchEmergency);
  $('other-form').addEventListener('submit', saveOtherSettings);
  $('reset-all').addEventListener('click', resetAll);
  setInterval(() => { if (key && !$('app').hidden) loadTimeline(); }, 30000);
  setInterval(() => { if (health) drawProviders(); }, 1000);
  if (key) login();
});
