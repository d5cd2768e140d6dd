// selftest.js — `#selftest` drives the page the way a person would (clicks
// on the canvas, typing a search, table and sandwich buttons), measures
// load and zoom-redraw times, and writes what it saw as JSON into
// <pre id="selftest">, where a headless browser's --dump-dom can read it.
// Options: st-fn=NAME (function to zoom into and sandwich), st-search=REGEX,
// st-runs=N (zoom redraws to time).

function runSelftest() {
  const q = app.state.q;
  const out = { ok: true, errors: [], timings: {} };
  const check = (cond, what) => {
    if (!cond) {
      out.ok = false;
      out.errors.push(what);
    }
  };
  const step = (name, f) => {
    try {
      out[name] = f();
    } catch (e) {
      out.ok = false;
      out.errors.push(name + ': ' + (e && e.stack ? e.stack : String(e)));
    }
  };
  const P = app.P;
  const mouse = (type, chart, node) => {
    const r = chart.rectOf(node);
    if (!r) throw new Error('node ' + node + ' was not drawn');
    const box = chart.canvas.getBoundingClientRect();
    chart.canvas.dispatchEvent(new MouseEvent(type, {
      bubbles: true,
      clientX: box.left + r.x + r.w / 2,
      clientY: box.top + r.y + r.h / 2,
    }));
  };
  const clickNode = (chart, node) => mouse('click', chart, node);
  const crumbs = () => [...document.querySelectorAll('#crumbs button')].map((b) => b.textContent);
  const topChildren = (T, k) => {
    const kids = [];
    for (let c = 1; c < T.n; c = T.end[c]) kids.push(c);
    kids.sort((a, b) => T.total[b] - T.total[a]);
    return kids.slice(0, k).map((c) => [P.strings[T.name[c]], T.total[c]]);
  };
  out.timings = Object.assign({}, app.timings);
  out.profile = { nodes: P.n, strings: P.strings.length, threads: P.threads.length, totals: P.totals, diff: P.diff };
  out.title = $('title').textContent;

  step('flame', () => {
    const drawn = app.chart.draw();
    check(drawn > 0, 'flame graph drew no frames');
    return { frames: drawn, rootTotal: app.T.total[0], viewNodes: app.T.n };
  });

  // The function to work with: given, or the one with the most self time.
  const stats = ensureStats();
  let fnId = P.strings.indexOf(q.get('st-fn') || '\u0000');
  if (fnId < 0 || !(stats.total[fnId] > 0)) {
    fnId = -1;
    for (const id of stats.ids) if (fnId < 0 || stats.self[id] > stats.self[fnId]) fnId = id;
  }
  const fnName = fnId >= 0 ? P.strings[fnId] : '';
  out.fn = fnName;

  if (P.diff) {
    step('diff', () => {
      const T = app.T;
      const grew = new Set();
      const shrank = new Set();
      const colors = {};
      for (let i = 1; i < T.n; i++) {
        const t = app.chart.diffRatio(i);
        const name = P.strings[T.name[i]];
        if (t > 0.05) grew.add(name);
        if (t < -0.05) shrank.add(name);
        if (t !== 0) colors[name] = app.chart.color(i);
      }
      return { grew: [...grew], shrank: [...shrank], colors };
    });
  }

  step('zoom', () => {
    // A drawn frame of the function, the widest; else the deepest wide frame.
    const T = app.T;
    const c = app.chart;
    let node = -1;
    let fallback = -1;
    for (let k = 0; k < c.count; k++) {
      const i = c.rn[k];
      if (T.depth[i] < T.frameDepth) continue;
      if (T.name[i] === fnId && (node < 0 || T.total[i] > T.total[node])) node = i;
      if (c.rw[k] >= 40 && (fallback < 0 || T.depth[i] > T.depth[fallback])) fallback = i;
    }
    if (node < 0) node = fallback;
    if (node < 0) throw new Error('no frame to zoom into');
    const target = P.strings[T.name[node]];
    mouse('mousemove', app.chart, node);
    const hover = $('details').textContent;
    check(hover.startsWith(target + ' — '), 'hover does not describe ' + target);
    clickNode(app.chart, node);
    const r = { target, hover, crumbs: crumbs(), hash: location.hash, frames: app.chart.count, details: $('details').textContent };
    check(r.crumbs[r.crumbs.length - 1] === target, 'zoom did not reach ' + target);
    check(/z=/.test(location.hash), 'zoom is not in the URL');
    // Time zoom redraws: in and out again, through the same path as a click.
    const path = pathOf(app.T, node);
    const runs = Math.max(1, Math.min(200, Number(q.get('st-runs')) || 20));
    const times = [];
    for (let k = 0; k < runs; k++) {
      const t0 = performance.now();
      update({ z: k % 2 ? path : [] }, false);
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    out.timings.zoomRedrawMedian = times[times.length >> 1];
    out.timings.zoomRedrawMax = times[times.length - 1];
    update({ z: [] }, false);
    return r;
  });

  step('search', () => {
    const input = $('search');
    const type = (text) => {
      input.value = text;
      input.dispatchEvent(new Event('input', { bubbles: true }));
      return $('match').textContent;
    };
    const re = q.get('st-search') || fnName.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const r = { regex: re, match: type(re), hash: location.hash };
    check(/matched \d/.test(r.match), 'search shows no matched share');
    check(/s=/.test(location.hash), 'search is not in the URL');
    r.matchedShare = matchedWeight(app.T, app.matches, 0, app.T.n) / app.T.total[0];
    r.highlighted = app.chart.count > 0 && app.matches ? app.matches.reduce((a, b) => a + b, 0) : 0;
    // Case: upper-cased, it matches only without the case toggle.
    const upper = re.toUpperCase();
    $('case').checked = true;
    $('case').dispatchEvent(new Event('change', { bubbles: true }));
    r.upperCaseSensitive = type(upper);
    $('case').checked = false;
    $('case').dispatchEvent(new Event('change', { bubbles: true }));
    r.upperCaseInsensitive = type(upper);
    r.invalid = type('(');
    type('');
    return r;
  });

  step('table', () => {
    document.querySelector('#tabs button[data-view="table"]').click();
    const rows = () => [...document.querySelectorAll('#fn-body tr')].slice(0, 8)
      .map((tr) => [...tr.children].slice(0, 5).map((td) => td.textContent));
    const r = { visible: !$('view-table').hidden, byTotal: rows() };
    document.querySelector('#fn-head th[data-sort="self"]').click();
    r.bySelf = rows();
    r.sortHash = location.hash;
    const row = [...document.querySelectorAll('#fn-body tr')].find((tr) => tr.firstChild.textContent === fnName);
    if (!row) throw new Error('no table row for ' + fnName);
    row.click();
    r.afterRowClick = { view: app.state.v, focus: app.state.fo, crumbs: crumbs(), hash: location.hash };
    check(app.state.fo && app.state.v === 'flame', 'row click did not focus');
    return r;
  });

  step('sandwich', () => {
    update({ fo: false, v: 'table' }, true);
    const row = [...document.querySelectorAll('#fn-body tr')].find((tr) => tr.firstChild.textContent === fnName);
    row.querySelector('button').click();
    const t = app.sw && app.sw.t;
    const r = {
      visible: !$('view-sandwich').hidden,
      title: $('callers-title').textContent,
      callers: t ? topChildren(t.callers, 5) : [],
      callees: t ? topChildren(t.callees, 5) : [],
      callersDrawn: app.callers.count,
      calleesDrawn: app.callees.count,
      hash: location.hash,
    };
    check(r.visible && r.callersDrawn > 0, 'sandwich not shown');
    return r;
  });

  step('merge', () => {
    update({ v: 'flame', f: fnId, fo: false, z: [] }, true);
    const before = app.T.total[0];
    document.querySelector('#selected button[data-action="merge"]').click();
    let left = 0;
    for (let i = 0; i < app.T.n; i++) if (app.T.name[i] === fnId) left++;
    const r = { hash: location.hash, left, total: app.T.total[0], before };
    check(left === 0 && r.total === before, 'merge left the function in the tree or lost time');
    const chip = [...document.querySelectorAll('#chips .chip')].find((c) => c.textContent.startsWith('merged: '));
    chip.click();
    r.restored = app.state.m.length === 0;
    return r;
  });

  step('filter', () => {
    update({ v: 'flame' }, true);
    const before = app.T.total[0];
    $('threads-btn').click();
    const box = document.querySelector('#threads-list input');
    if (!box) throw new Error('no thread checkboxes');
    box.click();
    const r = { threads: P.threads.length, before, after: app.T.total[0], hash: location.hash };
    $('threads-all').click();
    r.restored = app.T.total[0];
    $('threads-btn').click();
    return r;
  });

  step('groups', () => {
    const r = {};
    for (const g of GROUPS) {
      $('group').value = g;
      $('group').dispatchEvent(new Event('change', { bubbles: true }));
      r[g] = { roots: topChildren(app.T, 3), total: app.T.total[0] };
    }
    $('group').value = 'name';
    $('group').dispatchEvent(new Event('change', { bubbles: true }));
    return r;
  });

  step('icicle', () => {
    document.querySelector('#tabs button[data-view="icicle"]').click();
    return { frames: app.chart.count, inverted: app.chart.inverted };
  });

  step('reset', () => {
    $('reset').click();
    update({ v: 'flame' }, true);
    return { hash: location.hash, crumbs: crumbs() };
  });

  const pre = $('selftest');
  pre.textContent = JSON.stringify(out);
  pre.hidden = false;
  document.body.setAttribute('data-selftest', out.ok ? 'pass' : 'fail');
}
