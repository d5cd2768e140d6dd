// app.js — state (kept in the URL hash so a link reproduces the view),
// loading, and wiring the views together.

const VIEWS = ['flame', 'icicle', 'sandwich', 'table'];
const GROUPS = ['name', 'process', 'thread', 'all'];

const app = {
  P: null,
  warnings: [],
  state: null,
  T: null, // the flame graph's tree
  treeKey: '',
  stats: null,
  matches: null,
  searchKey: null,
  sortShowAll: false,
  chart: null,
  callers: null,
  callees: null,
  sw: null, // { f, key, callers, callees }
  timings: {},
};

function idList(s, limit) {
  if (!s) return [];
  return s
    .split('.')
    .map(Number)
    .filter((x) => Number.isInteger(x) && x >= 0 && x < limit);
}

/** State from the hash: v, z, s, c, f, fo, g, h, m, o (sort key, '-' for ascending). */
function parseHash(hash) {
  const q = new URLSearchParams(hash.replace(/^#/, ''));
  const S = app.P ? app.P.strings.length : 0;
  const o = q.get('o') || 'total';
  const f = Number(q.get('f'));
  return {
    v: VIEWS.includes(q.get('v')) ? q.get('v') : 'flame',
    z: idList(q.get('z'), S),
    s: q.get('s') || '',
    c: q.get('c') === '1',
    f: Number.isInteger(f) && f >= 0 && f < S && q.get('f') !== '' && q.has('f') ? f : -1,
    fo: q.get('fo') === '1',
    g: GROUPS.includes(q.get('g')) ? q.get('g') : 'name',
    h: idList(q.get('h'), app.P ? app.P.threads.length : 0),
    m: idList(q.get('m'), S),
    sort: { key: o.replace(/^-/, ''), asc: o.startsWith('-') },
    selftest: q.has('selftest'),
    q,
  };
}

function stateHash(st) {
  const q = new URLSearchParams();
  if (st.v !== 'flame') q.set('v', st.v);
  if (st.z.length) q.set('z', st.z.join('.'));
  if (st.s) q.set('s', st.s);
  if (st.c) q.set('c', '1');
  if (st.f >= 0) q.set('f', String(st.f));
  if (st.fo) q.set('fo', '1');
  if (st.g !== 'name') q.set('g', st.g);
  if (st.h.length) q.set('h', st.h.join('.'));
  if (st.m.length) q.set('m', st.m.join('.'));
  if (st.sort.key !== 'total' || st.sort.asc) q.set('o', (st.sort.asc ? '-' : '') + st.sort.key);
  if (st.selftest) for (const [k, v] of st.q) if (k.startsWith('selftest') || k.startsWith('st-')) q.set(k, v);
  return '#' + q.toString();
}

/** Applies a change: new history entry when `push`, else replaces the current one. */
function update(change, push) {
  app.state = Object.assign({}, app.state, change);
  const hash = stateHash(app.state);
  if (hash !== location.hash && !(hash === '#' && location.hash === '')) {
    try {
      history[push ? 'pushState' : 'replaceState'](null, '', hash);
    } catch (e) {
      // Some file:// contexts refuse history changes; the view still updates.
    }
  }
  render();
}

function viewKey(st) {
  return [st.g, st.h.join('.'), st.m.join('.'), st.fo ? st.f : -1].join('|');
}

function ensureTree() {
  const st = app.state;
  const key = viewKey(st);
  if (key === app.treeKey && app.T) return;
  const t0 = performance.now();
  app.T = buildView(app.P, {
    group: st.g,
    hidden: new Set(st.h),
    merged: new Set(st.m),
    focus: st.fo ? st.f : -1,
  });
  app.timings.buildView = performance.now() - t0;
  app.treeKey = key;
  app.stats = null;
  app.sw = null;
  app.chart.setTree(app.P, app.T);
}

function ensureStats() {
  if (!app.stats) {
    app.stats = functionStats(app.P, app.T);
    app.stats.tree = app.T;
  }
  return app.stats;
}

function ensureSearch() {
  const st = app.state;
  const key = st.s + '\u0000' + st.c;
  if (key === app.searchKey) return;
  app.searchKey = key;
  app.matches = null;
  const input = $('search');
  input.classList.remove('bad');
  if (!st.s) return;
  try {
    app.matches = matchStrings(app.P, new RegExp(st.s, st.c ? '' : 'i'));
  } catch (e) {
    input.classList.add('bad');
  }
}

function render() {
  const st = app.state;
  const P = app.P;
  ensureTree();
  ensureSearch();
  const T = app.T;
  const zoom = resolvePath(T, st.z);
  app.chart.zoom = zoom;
  app.chart.matches = app.matches;
  app.chart.inverted = st.v === 'icicle';

  for (const b of document.querySelectorAll('#tabs button')) {
    b.setAttribute('aria-pressed', String(b.dataset.view === st.v));
  }
  $('view-flame').hidden = st.v !== 'flame' && st.v !== 'icicle';
  $('view-sandwich').hidden = st.v !== 'sandwich';
  $('view-table').hidden = st.v !== 'table';
  if ($('search').value !== st.s) $('search').value = st.s;
  $('case').checked = st.c;
  $('group').value = st.g;

  const charted = st.v === 'flame' || st.v === 'icicle';
  $('crumbs').hidden = !charted;
  renderCrumbs(P, T, zoom, (node) => update({ z: pathOf(T, node) }, true));
  renderChips(P, st, (change) => update(change, true));
  $('details').textContent = T.n ? describeNode(P, T, zoom, P.unit) : 'no samples';

  const match = $('match');
  if (st.s && !app.matches) match.textContent = 'invalid regex';
  else if (app.matches) {
    const all = matchedWeight(T, app.matches, 0, T.n);
    const inZoom = matchedWeight(T, app.matches, zoom, T.end[zoom] || 0);
    match.textContent = 'matched ' + fmtPct(all, T.total[0]) +
      (zoom > 0 ? ' (' + fmtPct(inZoom, T.total[zoom]) + ' of zoom)' : '');
  } else match.textContent = '';

  if (!$('threads-panel').hidden) renderThreads(P, st.h, (h) => update({ h, z: [] }, true));
  if (charted) {
    app.chart.draw();
  } else if (st.v === 'sandwich') {
    renderSandwich();
  } else {
    renderTable(P, ensureStats(), st.sort, app.sortShowAll, onSort, onPick);
  }
}

function renderSandwich() {
  const st = app.state;
  const P = app.P;
  let f = st.f;
  if (f < 0) {
    // Nothing selected yet: the function with the most self time.
    const s = ensureStats();
    for (const id of s.ids) if (f < 0 || s.self[id] > s.self[f]) f = id;
  }
  const key = app.treeKey + '#' + f;
  if (!app.sw || app.sw.key !== key) {
    const t = f >= 0 ? sandwich(P, app.T, f) : null;
    app.sw = { key, f, t };
  }
  const name = f >= 0 ? P.strings[f] : '(none)';
  $('callers-title').textContent = 'Callers of ' + name;
  $('callees-title').textContent = 'Callees of ' + name;
  if (app.sw.t) $('details').textContent = describeFunction(P, app.T, app.sw.t.callees, P.unit);
  for (const [chart, tree] of [
    [app.callers, app.sw.t && app.sw.t.callers],
    [app.callees, app.sw.t && app.sw.t.callees],
  ]) {
    if (!tree) continue;
    chart.setTree(P, tree);
    chart.matches = app.matches;
    chart.draw();
  }
}

function onSort(key) {
  const cur = app.state.sort;
  const asc = cur.key === key ? !cur.asc : key === 'name';
  update({ sort: { key, asc } }, false);
}

function onPick(id, how) {
  if (how === 'sandwich') update({ f: id, v: 'sandwich' }, true);
  else update({ f: id, fo: true, v: 'flame', z: [] }, true);
}

function showError(msg) {
  const e = $('error');
  e.hidden = false;
  e.textContent = msg;
}

function wire() {
  const hoverTo = (chart) => (n) => {
    const T = chart.T;
    if (!T) return;
    $('details').textContent = n >= 0 ? describeNode(app.P, T, n, app.P.unit) : '';
  };
  app.chart = new FlameChart($('flame'), {
    onClick: (n) => update({ z: pathOf(app.T, n), f: app.T.depth[n] >= app.T.frameDepth ? app.T.name[n] : app.state.f }, true),
    onHover: (n) => {
      const T = app.T;
      $('details').textContent = describeNode(app.P, T, n >= 0 ? n : resolvePath(T, app.state.z), app.P.unit);
    },
  });
  const pickIn = (chart) => (n) => update({ f: chart.T.name[n] }, true);
  app.callers = new FlameChart($('callers'), { inverted: false, onHover: null, onClick: null });
  app.callees = new FlameChart($('callees'), { inverted: true, onHover: null, onClick: null });
  for (const c of [app.callers, app.callees]) {
    c.onHover = hoverTo(c);
    c.onClick = pickIn(c);
  }
  for (const b of document.querySelectorAll('#tabs button')) {
    b.addEventListener('click', () => update({ v: b.dataset.view }, true));
  }
  $('search').addEventListener('input', () => update({ s: $('search').value }, false));
  $('case').addEventListener('change', () => update({ c: $('case').checked }, false));
  $('group').addEventListener('change', () => update({ g: $('group').value, z: [] }, true));
  $('reset').addEventListener('click', () =>
    update({ z: [], s: '', fo: false, m: [], h: [] }, true));
  $('fn-more').addEventListener('click', () => {
    app.sortShowAll = true;
    render();
  });
  $('threads-btn').addEventListener('click', () => {
    $('threads-panel').hidden = !$('threads-panel').hidden;
    render();
  });
  $('threads-all').addEventListener('click', () => update({ h: [], z: [] }, true));
  $('threads-none').addEventListener('click', () =>
    update({ h: app.P.threads.map((t) => t.index), z: [] }, true));
  $('info-btn').addEventListener('click', () => {
    $('info-panel').hidden = !$('info-panel').hidden;
  });
  const fromUrl = () => {
    if (stateHash(app.state) === location.hash) return;
    app.state = parseHash(location.hash);
    render();
  };
  window.addEventListener('hashchange', fromUrl);
  window.addEventListener('popstate', fromUrl);
  let pending = false;
  window.addEventListener('resize', () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      render();
    });
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === '/' && document.activeElement !== $('search')) {
      e.preventDefault();
      $('search').focus();
    } else if (e.key === 'Escape') {
      update({ z: [] }, true);
    }
  });
}

/** Starts the page from decoded JSON. */
function start(data) {
  const t0 = performance.now();
  app.P = decodeProfile(data);
  app.timings.decode = performance.now() - t0;
  app.warnings = Array.isArray(data.warnings) ? data.warnings : [];
  document.title = app.P.title + ' — flamerec';
  $('title').textContent = app.P.title;
  $('title').title = app.P.title;
  renderInfo(app.P, app.warnings);
  wire();
  app.state = parseHash(location.hash);
  const t1 = performance.now();
  render();
  app.timings.firstRender = performance.now() - t1;
  app.timings.loaded = performance.now();
  if (app.state.selftest) runSelftest();
}

function boot() {
  const inline = document.getElementById('flamerec-data');
  try {
    if (inline) {
      const t0 = performance.now();
      const data = JSON.parse(inline.textContent);
      app.timings.parse = performance.now() - t0;
      start(data);
      return;
    }
  } catch (e) {
    showError('cannot read the profile: ' + e.message);
    return;
  }
  const t0 = performance.now();
  fetch('profile.json')
    .then((r) => {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.json();
    })
    .then((data) => {
      app.timings.fetch = performance.now() - t0;
      start(data);
    })
    .catch((e) => showError('cannot load the profile: ' + e.message));
}
