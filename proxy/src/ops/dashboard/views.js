// The dashboard's views beyond health: rates, combos and their paths, sessions and leases,
// the timeline and the resilience settings besides the lockout card. Loaded before app.js;
// like it, everything is written with textContent (the timeline is an <img> of an SVG, which
// cannot run script).
'use strict';

let overview = null;
let timelineUrl = null;

const BARS = '▁▂▃▄▅▆▇█';

// Counts per minute as a row of bars, scaled to the largest.
function spark(counts) {
  const max = Math.max(1, ...counts);
  return counts.map((n) => (n === 0 ? '·' : BARS[Math.min(7, Math.floor((n / max) * 7.999))])).join('');
}

function drawRates() {
  const rows = overview.rates.providers;
  $('rates-empty').hidden = rows.length > 0;
  $('rates').tBodies[0].replaceChildren(...rows.map((r) => {
    const tr = row([r.provider || '(no provider)', r.requests_15m, r.errors_15m,
      r.requests_15m ? (100 * r.errors_15m / r.requests_15m).toFixed(1) + ' %' : '',
      spark(r.requests), spark(r.errors)]);
    tr.dataset.provider = r.provider;
    return tr;
  }));
}

function pathText(p) {
  return p.steps.map((s) => (s.target ? s.target + ' @ ' + s.connection + ': ' : '') + s.result).join(' → ');
}

function drawCombos() {
  const box = $('combos-list');
  $('combos-empty').hidden = overview.combos.length > 0;
  box.replaceChildren(...overview.combos.map((c) => {
    const div = document.createElement('div');
    div.className = 'combo';
    div.dataset.combo = c.name;
    const h = document.createElement('h3');
    h.textContent = c.name + ' (' + c.strategy + ')';
    const table = document.createElement('table');
    table.className = 'combo-targets';
    const body = document.createElement('tbody');
    for (const t of c.targets) {
      const list = t.connections.map((x) => x.connection + (x.excluded ? ' — ' + x.excluded : ' — eligible')).join(', ');
      const tr = row([t.target, list]);
      tr.dataset.target = t.target;
      if (t.connections.every((x) => x.excluded)) tr.className = 'excluded';
      body.appendChild(tr);
    }
    table.appendChild(body);
    const recent = document.createElement('ol');
    recent.className = 'paths';
    for (const p of c.recent) {
      const li = document.createElement('li');
      li.textContent = p.at + ' ' + p.status + ': ' + (pathText(p) || 'no attempt');
      recent.appendChild(li);
    }
    const none = document.createElement('p');
    none.textContent = c.recent.length ? 'Last requests, newest first:' : 'No requests yet.';
    div.append(h, table, none, recent);
    return div;
  }));
}

function drawSessions() {
  const pins = overview.pins;
  $('pins-count').textContent = pins.active + ' pinned session(s)' +
    (pins.items.length < pins.active ? ', the first ' + pins.items.length + ' listed' : '');
  $('pins').tBodies[0].replaceChildren(...pins.items.map((p) =>
    row([p.session, p.provider, p.connection, seconds(p.expires_in_ms)])));
  const l = overview.leases;
  $('leases-count').textContent = l.error ? l.error : l.active + ' active lease(s)';
  $('leases').tBodies[0].replaceChildren(...l.items.map((x) =>
    row([x.owner, x.generation, x.key, x.connection])));
}

async function loadTimeline() {
  const r = await fetch('/api/monitoring/timeline', { headers: { 'x-ferroute-admin-key': key || '' } });
  if (r.status !== 200) return;
  const blob = await r.blob();
  const url = URL.createObjectURL(new Blob([blob], { type: 'image/svg+xml' }));
  $('timeline-img').src = url;
  if (timelineUrl) URL.revokeObjectURL(timelineUrl);
  timelineUrl = url;
}

async function refreshOverview() {
  const r = await api('GET', '/api/monitoring/dashboard');
  if (r.status !== 200 || !r.data) return;
  overview = r.data;
  drawRates();
  drawCombos();
  drawSessions();
  loadTimeline();
}

// The resilience settings besides the lockout card, one input per setting, by path.
const SECTIONS = [
  ['breaker', 'Circuit breaker (per provider class)'],
  ['provider_cooldown', 'Provider cooldown window'],
  ['connection_cooldown', 'Connection cooldowns (per class)'],
  ['request_queue', 'Request queue'],
  ['throughput_watchdog', 'Slow-stream watchdog'],
  ['combo_cooldown_wait', 'Combo cooldown wait'],
];

function leaves(value, path, out) {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const k of Object.keys(value)) leaves(value[k], path.concat(k), out);
  } else if (typeof value === 'number' || typeof value === 'boolean') {
    out.push([path, value]);
  }
  return out;
}

// Every overridden setting's path (arrays count as one setting).
function overriddenPaths(value, path, out) {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const k of Object.keys(value)) overriddenPaths(value[k], path.concat(k), out);
  } else if (path.length) {
    out.push(path.join('.'));
  }
  return out;
}

let settingsShown = null;

function drawOtherSettings(effective, overrides) {
  settingsShown = effective;
  const form = $('other-form');
  const parts = [];
  for (const [section, label] of SECTIONS) {
    const fs = document.createElement('fieldset');
    const lg = document.createElement('legend');
    lg.textContent = label;
    fs.appendChild(lg);
    for (const [path, value] of leaves(effective[section], [section], [])) {
      const name = path.join('.');
      const div = document.createElement('div');
      div.className = 'field';
      const lab = document.createElement('label');
      const input = document.createElement('input');
      input.dataset.path = name;
      if (typeof value === 'boolean') { input.type = 'checkbox'; input.checked = value; } else { input.type = 'number'; input.value = value; }
      const text = document.createElement('span');
      text.textContent = path.slice(1).join(' · ') + ' ';
      lab.append(text, input);
      let o = overrides;
      for (const k of path) o = o && typeof o === 'object' ? o[k] : undefined;
      if (o !== undefined) { const m = document.createElement('em'); m.textContent = ' overridden'; lab.appendChild(m); }
      const err = document.createElement('span');
      err.className = 'error';
      err.dataset.for = name;
      div.append(lab, err);
      fs.appendChild(div);
    }
    parts.push(fs);
  }
  const save = document.createElement('button');
  save.type = 'submit';
  save.id = 'other-save';
  save.textContent = 'Save';
  parts.push(save);
  form.replaceChildren(...parts);
}

async function saveOtherSettings(ev) {
  ev.preventDefault();
  for (const s of document.querySelectorAll('#other-form .error')) s.textContent = '';
  $('other-error').textContent = '';
  const patch = {};
  for (const input of document.querySelectorAll('#other-form input[data-path]')) {
    const path = input.dataset.path.split('.');
    let was = settingsShown;
    for (const k of path) was = was[k];
    const now = input.type === 'checkbox' ? input.checked : (input.value === '' ? NaN : Number(input.value));
    if (now === was) continue;
    let o = patch;
    for (const k of path.slice(0, -1)) o = (o[k] = o[k] || {});
    o[path[path.length - 1]] = Number.isNaN(now) ? input.value : now;
  }
  if (Object.keys(patch).length === 0) { $('other-error').textContent = 'nothing changed'; return; }
  const r = await api('PATCH', '/api/resilience/settings', patch);
  if (r.status === 200) { await loadSettings(); return; }
  const problems = (r.data && r.data.error && r.data.error.problems) || [];
  let placed = false;
  for (const p of problems) {
    const field = String(p.field).replace(/^resilience\./, '');
    const slot = document.querySelector('#other-form .error[data-for="' + CSS.escape(field) + '"]');
    if (slot) { slot.textContent = p.message; placed = true; }
  }
  if (!placed) $('other-error').textContent = r.data && r.data.error ? r.data.error.message : 'refused';
}
