// musterd's console: a page over the JSON API (/api/v1/, docs/console.md).
// Every text that comes from the server (job ids, host names, failures) is
// set as textContent, never as markup; the token lives in this tab's
// sessionStorage and leaves it only as an Authorization header.
'use strict';

const TOKEN_KEY = 'muster-token';
const REFRESH_MS = 1000;

const $ = (id) => document.getElementById(id);

let pageToken = '';     // the page of the jobs table shown now ('' = first)
let nextToken = '';     // the page after it
let timer = null;

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

function cell(row, text, className) {
  const td = document.createElement('td');
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function show(section) {
  for (const id of ['signin', 'cluster', 'job']) $(id).hidden = id !== section;
}

// GET an API path; resolves to the JSON, or null after showing sign-in (401).
async function api(path) {
  const headers = {};
  if (token()) headers['Authorization'] = 'Bearer ' + token();
  const r = await fetch(path, {headers, cache: 'no-store', credentials: 'omit'});
  const body = await r.json().catch(() => ({}));
  if (r.status === 401) {
    const refused = token() !== '';
    sessionStorage.removeItem(TOKEN_KEY);
    show('signin');
    const why = (body.error && body.error.message) || 'a token is needed';
    $('signin-error').textContent = refused ? 'Refused: ' + why : '';
    $('signout').hidden = true;
    return null;
  }
  if (!r.ok) {
    throw new Error((body.error && body.error.message) || ('HTTP ' + r.status));
  }
  return body;
}

function nodesOf(job) {
  const n = (job.members || []).length + Number(job.members_omitted || 0);
  return n + ' of ' + job.min_nodes + ':' + job.max_nodes;
}

function ranksOf(peer) {
  const first = Number(peer.rank_offset || 0);
  const n = Number(peer.local_world_size || 0);
  return n <= 1 ? String(first) : first + '-' + (first + n - 1);
}

// The last 5 minutes of the server's counters, one sample a refresh.
const samples = [];
const WINDOW_MS = 5 * 60 * 1000;

function rate(key) {
  if (samples.length < 2) return 0;
  const a = samples[samples.length - 2];
  const b = samples[samples.length - 1];
  const dt = (b.time_ms - a.time_ms) / 1000;
  return dt > 0 ? Math.max(0, (b[key] - a[key]) / dt) : 0;
}

function drawChart() {
  const now = samples.length ? samples[samples.length - 1].time_ms : 0;
  const series = {joins: [], rounds: [], store: []};
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1];
    const b = samples[i];
    const dt = (b.time_ms - a.time_ms) / 1000;
    if (dt <= 0) continue;
    const x = 600 - (now - b.time_ms) / WINDOW_MS * 600;
    series.joins.push([x, (b.joins_total - a.joins_total) / dt]);
    series.rounds.push([x, (b.rounds_total - a.rounds_total) / dt]);
    series.store.push([x, (b.store_ops_total - a.store_ops_total) / dt]);
  }
  let max = 1;
  for (const s of Object.values(series)) for (const [, y] of s) max = Math.max(max, y);
  for (const [name, s] of Object.entries(series)) {
    $('line-' + name).setAttribute('points', s.map(([x, y]) =>
        x.toFixed(1) + ',' + (118 - y / max * 114).toFixed(1)).join(' '));
  }
  $('chart-max').textContent = max.toFixed(max < 10 ? 1 : 0);
}

// Replicas: each etcd member as this musterd sees it (none without etcd).
function renderEtcd(members) {
  const list = members || [];
  $('etcd-card').hidden = list.length === 0;
  $('etcd-box').hidden = list.length === 0;
  if (list.length === 0) return;
  const healthy = list.filter((m) => m.healthy).length;
  $('etcd').textContent = healthy + ' of ' + list.length + ' healthy';
  // A majority keeps etcd (and so musterd's replicas) working.
  $('etcd').className = healthy === list.length ? 'ok' : (2 * healthy > list.length ? 'warn' : 'error');
  const body = document.createElement('tbody');
  for (const m of list) {
    const row = document.createElement('tr');
    cell(row, m.endpoint);
    cell(row, m.healthy ? 'healthy' : 'unhealthy: ' + m.error, m.healthy ? 'ok' : 'error');
    cell(row, m.version);
    cell(row, m.healthy ? (m.leader ? 'leader' : 'follower') : '');
    cell(row, m.healthy ? bytes(m.db_size_bytes) : '');
    cell(row, m.healthy ? m.raft_term : '');
    body.appendChild(row);
  }
  $('etcd-members').replaceChild(body, $('etcd-members').tBodies[0]);
}

function renderTotals(c) {
  $('server').textContent = 'musterd ' + c.server_version;
  $('replica').textContent = c.serving ? (c.epoch > 0 ? 'leader, epoch ' + c.epoch : 'serving') :
      (c.replica_status || 'standby');
  $('replica').className = c.serving ? 'ok' : 'warn';
  renderEtcd(c.etcd);
  if (!c.serving) return;
  $('c-jobs').textContent = c.jobs;
  $('c-agents').textContent = c.agents_connected;
  samples.push(c);
  while (samples.length > 2 && c.time_ms - samples[0].time_ms > WINDOW_MS) samples.shift();
  $('r-joins').textContent = rate('joins_total').toFixed(1);
  $('r-rounds').textContent = rate('rounds_total').toFixed(1);
  $('r-store').textContent = rate('store_ops_total').toFixed(0);
  drawChart();
}

async function renderCluster() {
  const params = new URLSearchParams();
  params.set('page_size', '100');
  if (pageToken) params.set('page_token', pageToken);
  if ($('q').value) params.set('q', $('q').value);
  if ($('state').value) params.set('state', $('state').value);
  // Both at once: a page turn costs one round trip, not two.
  const [cluster, data] = await Promise.all(
      [api('/api/v1/cluster'), api('/api/v1/jobs?' + params.toString())]);
  if (cluster === null || data === null) return;
  renderTotals(cluster);
  show('cluster');
  $('total').textContent = '(' + data.total_jobs + ')';
  nextToken = data.next_page_token || '';
  $('next').disabled = !nextToken;
  $('first').disabled = !pageToken;
  const body = document.createElement('tbody');
  for (const job of data.jobs || []) {
    const row = document.createElement('tr');
    const link = document.createElement('a');
    link.href = '/jobs/' + encodeURIComponent(job.job_id);
    link.textContent = job.job_id;
    cell(row, '').appendChild(link);
    cell(row, job.state, 'state-' + String(job.state).toLowerCase());
    cell(row, job.round);
    cell(row, nodesOf(job));
    cell(row, job.restart_count + ' of ' + job.max_restarts);
    cell(row, job.last_failure || '', 'failure-cell');
    body.appendChild(row);
  }
  $('jobs').replaceChild(body, $('jobs').tBodies[0]);
}

function peerRows(table, peers) {
  const body = document.createElement('tbody');
  for (const p of peers || []) {
    const row = document.createElement('tr');
    cell(row, p.node_id);
    cell(row, p.hostname);
    cell(row, p.advertised_addr);
    cell(row, ranksOf(p));
    body.appendChild(row);
  }
  table.replaceChild(body, table.tBodies[0]);
}

function duration(ms) {
  const s = Math.round(ms / 1000);
  if (s < 120) return s + ' s';
  if (s < 7200) return Math.round(s / 60) + ' min';
  return (s / 3600).toFixed(1) + ' h';
}

// The job's rounds, newest first: when each became ready and what ended it.
function renderTimeline(history) {
  const body = document.createElement('tbody');
  const now = Date.now();
  for (const r of [...history].reverse()) {
    const row = document.createElement('tr');
    const ready = Number(r.ready_unix_ms);
    const ended = Number(r.ended_unix_ms);
    cell(row, r.round + (r.in_place ? ' (in place)' : ''));
    cell(row, new Date(ready).toLocaleString());
    cell(row, duration((ended || now) - ready) + (ended ? '' : ', running'));
    cell(row, r.nodes + ' / ' + r.world_size);
    cell(row, r.ended_by || '', 'ended-' + String(r.ended_by || 'running').replace(/ /g, '-'));
    cell(row, r.reason || '', 'failure-cell');
    body.appendChild(row);
  }
  $('timeline').replaceChild(body, $('timeline').tBodies[0]);
}

// Every rank's speed score, slowest first, stragglers marked; and the nodes
// excluded from the job.
function renderSpeeds(job) {
  const threshold = Number(job.straggler_threshold || 0);
  $('speed-policy').textContent = job.straggler_action
      ? '(action ' + job.straggler_action + ', threshold ' + threshold + ')' : '';
  const since = new Map();
  for (const s of job.stragglers || []) since.set(Number(s.rank), Number(s.since));
  const body = document.createElement('tbody');
  const speeds = [...(job.speeds || [])].sort((a, b) => a.score - b.score);
  for (const s of speeds) {
    const row = document.createElement('tr');
    const slow = since.has(Number(s.rank));
    if (slow) row.className = 'straggler';
    cell(row, s.rank);
    cell(row, s.node_id);
    const td = document.createElement('td');
    const meter = document.createElement('meter');
    meter.min = 0;
    meter.max = 1;
    meter.low = threshold;
    meter.optimum = 1;
    meter.value = Number(s.score);
    td.appendChild(meter);
    row.appendChild(td);
    cell(row, Number(s.score).toFixed(2));
    cell(row, slow ? new Date(since.get(Number(s.rank))).toLocaleTimeString() : '');
    body.appendChild(row);
  }
  $('speeds').replaceChild(body, $('speeds').tBodies[0]);
  const excluded = job.excluded || [];
  $('excluded-box').hidden = excluded.length === 0;
  const ex = document.createElement('tbody');
  for (const e of excluded) {
    const row = document.createElement('tr');
    cell(row, e.node_id);
    cell(row, e.hostname);
    cell(row, e.reason, 'failure-cell');
    cell(row, new Date(Number(e.until_unix_ms)).toLocaleString());
    ex.appendChild(row);
  }
  $('excluded').replaceChild(ex, $('excluded').tBodies[0]);
}

// "3.4 KiB": binary units, as the Store's limits are set.
function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n);
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? v + ' B' : v.toFixed(1) + ' ' + units[u];
}

// The current round's Store use against musterd's limits (one-job answers of
// a job that runs or forms a round).
function renderStore(job) {
  const store = job.store;
  $('store-box').hidden = !store;
  if (!store) return;
  $('store-prefix').textContent = '(' + store.prefix + ')';
  const keys = Number(store.keys);
  const maxKeys = Number(store.max_keys);
  const used = Number(store.bytes);
  const maxBytes = Number(store.max_bytes);
  $('store-keys-meter').value = maxKeys > 0 ? keys / maxKeys : 0;
  $('store-keys').textContent = keys + ' of ' + maxKeys;
  $('store-bytes-meter').value = maxBytes > 0 ? used / maxBytes : 0;
  $('store-bytes').textContent = bytes(used) + ' of ' + bytes(maxBytes);
}

async function renderJob(id) {
  const job = await api('/api/v1/jobs/' + encodeURIComponent(id));
  if (job === null) return;
  show('job');
  $('job-title').textContent = 'Job ' + job.job_id;
  const facts = $('job-facts');
  facts.replaceChildren();
  for (const [k, v] of [['state', job.state], ['round', job.round],
                        ['nodes', nodesOf(job)],
                        ['restarts', job.restart_count + ' of ' +
                                     job.max_restarts],
                        ['stragglers', (job.stragglers || []).length]]) {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v;
    facts.append(dt, dd);
  }
  renderTimeline(job.history || []);
  renderSpeeds(job);
  renderStore(job);
  $('job-failure').textContent = job.last_failure || 'none';
  $('job-failure').classList.toggle('none', !job.last_failure);
  const first = job.first_failure || {};
  $('traceback-box').hidden = !first.traceback;
  $('traceback').textContent = first.traceback || '';
  $('traceback-rank').textContent = first.global_rank === undefined ? '' : first.global_rank;
  peerRows($('members'), job.members);
  peerRows($('waiting'), job.waiting);
}

function rangesOf(ranks) {
  const out = [];
  for (let i = 0; i < ranks.length; i++) {
    let j = i;
    while (j + 1 < ranks.length && ranks[j + 1] === ranks[j] + 1) j++;
    out.push(i === j ? String(ranks[i]) : ranks[i] + '-' + ranks[j]);
    i = j;
  }
  return out.join(',');
}

// Asks musterd for the job's stacks now (it asks the agents) and shows them
// grouped, the odd ones out first-class.
async function captureStacks(id) {
  $('stacks-button').disabled = true;
  $('stacks-note').textContent = 'asking the agents...';
  try {
    const data = await api('/api/v1/jobs/' + encodeURIComponent(id) + '/stacks');
    if (data === null) return;
    const box = document.createElement('div');
    for (const g of data.groups || []) {
      const div = document.createElement('div');
      div.className = 'group' + (g.odd_one_out ? ' odd' : '');
      const h = document.createElement('h3');
      h.textContent = 'ranks ' + rangesOf(g.ranks) + ' (' + g.ranks.length + ')' +
          (g.odd_one_out ? ' — odd one out' : '') + (g.kind ? ' · ' + g.kind : '');
      div.appendChild(h);
      if (g.error) {
        const p = document.createElement('p');
        p.className = 'error';
        p.textContent = g.error;
        div.appendChild(p);
      }
      const ol = document.createElement('ol');
      for (const f of g.frames || []) {
        const li = document.createElement('li');
        li.textContent = f;
        ol.appendChild(li);
      }
      div.appendChild(ol);
      box.appendChild(div);
    }
    for (const m of data.missing || []) {
      const p = document.createElement('p');
      p.className = 'error';
      p.textContent = 'no answer: ' + m;
      box.appendChild(p);
    }
    $('stacks').replaceChildren(box);
    $('stacks-note').textContent = 'captured ' + new Date().toLocaleTimeString() +
        ', innermost frame first';
  } catch (e) {
    $('stacks-note').textContent = String(e.message || e);
  } finally {
    $('stacks-button').disabled = false;
  }
}

async function render() {
  try {
    const path = location.pathname;
    if (path.startsWith('/jobs/')) {
      await renderJob(decodeURIComponent(path.slice('/jobs/'.length)));
    } else {
      await renderCluster();
    }
    $('error').textContent = '';
    $('live').classList.remove('stale');
    $('signout').hidden = !token();
  } catch (e) {
    $('error').textContent = String(e.message || e);
    $('live').classList.add('stale');
  }
}

// Live: one refresh a second while the tab is visible, never two at once.
function schedule() {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    if (!document.hidden && $('signin').hidden) await render();
    schedule();
  }, REFRESH_MS);
}

document.addEventListener('DOMContentLoaded', () => {
  $('signin-form').addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
    $('token').value = '';
    $('signin-error').textContent = '';
    render();
  });
  $('signout').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    render();
  });
  $('filter').addEventListener('input', () => { pageToken = ''; render(); });
  $('filter').addEventListener('submit', (e) => e.preventDefault());
  $('next').addEventListener('click', () => { pageToken = nextToken; render(); });
  $('first').addEventListener('click', () => { pageToken = ''; render(); });
  $('stacks-button').addEventListener('click', () => {
    if (location.pathname.startsWith('/jobs/')) {
      captureStacks(decodeURIComponent(location.pathname.slice('/jobs/'.length)));
    }
  });
  render();
  schedule();
});
