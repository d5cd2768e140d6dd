// panels.js — the DOM around the charts: breadcrumbs, details line, top
// functions table, thread filter, info. Every piece of profile text goes
// in through textContent; nothing here sets innerHTML.

const $ = (id) => document.getElementById(id);

/** An element with text content and plain attributes. */
function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (attrs) for (const k of Object.keys(attrs)) e.setAttribute(k, attrs[k]);
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function fmtCount(x) {
  const s = String(Math.round(x));
  return s.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

function fmtPct(part, whole) {
  return whole > 0 ? ((100 * part) / whole).toFixed(2) + '%' : '–';
}

/** Percentage points with a sign. */
function fmtPp(x) {
  const v = 100 * x;
  return (v > 0 ? '+' : v < 0 ? '−' : '±') + Math.abs(v).toFixed(2) + ' pp';
}

function deltaClass(x) {
  return x > 1e-12 ? 'grew' : x < -1e-12 ? 'shrank' : '';
}

/** One line about node i of tree T, whose root total is the 100%. */
function describeNode(P, T, i, unit) {
  const name = P.strings[T.name[i]];
  const all = T.total[0];
  let s = name + ' — ' + fmtCount(T.total[i]) + ' ' + unit + ', total ' + fmtPct(T.total[i], all) +
    ', self ' + fmtPct(T.self[i], all);
  if (T.selfB) {
    const allB = T.totalB[0];
    const share = (a, b) => (b > 0 ? a / b : 0);
    s += ' | base total ' + fmtPct(T.totalB[i], allB) + ' → new ' + fmtPct(T.total[i], all) +
      ' (' + fmtPp(share(T.total[i], all) - share(T.totalB[i], allB)) + '), self ' +
      fmtPp(share(T.self[i], all) - share(T.selfB[i], allB));
  }
  return s;
}

/** One line about a function, from its merged callees tree C (f at the root) within view T. */
function describeFunction(P, T, C, unit) {
  const all = T.total[0];
  let s = P.strings[C.name[0]] + ' — ' + fmtCount(C.total[0]) + ' ' + unit + ', total ' +
    fmtPct(C.total[0], all) + ', self ' + fmtPct(C.self[0], all);
  if (T.totalB) {
    const share = (a, b) => (b > 0 ? a / b : 0);
    s += ' | total ' + fmtPp(share(C.total[0], all) - share(C.totalB[0], T.totalB[0])) +
      ', self ' + fmtPp(share(C.self[0], all) - share(C.selfB[0], T.totalB[0]));
  }
  return s;
}

/** Breadcrumbs from the root to `zoom`; a click zooms to that ancestor. */
function renderCrumbs(P, T, zoom, onZoom) {
  const box = $('crumbs');
  clear(box);
  const path = [];
  for (let i = zoom; i >= 0; i = T.parent[i]) path.push(i);
  path.reverse();
  path.forEach((node, k) => {
    if (k > 0) box.appendChild(el('span', '›', { class: 'sep' }));
    const b = el('button', P.strings[T.name[node]], { 'data-node': String(node) });
    b.addEventListener('click', () => onZoom(node));
    box.appendChild(b);
  });
}

/** Removable chips for focus, merged functions and hidden threads, and
 * what can be done with the selected function. */
function renderChips(P, state, onChange) {
  const box = $('chips');
  clear(box);
  if (state.f >= 0) {
    const sel = el('span', null, { id: 'selected' });
    sel.appendChild(el('span', ' selected: ', { class: 'muted' }));
    sel.appendChild(el('b', P.strings[state.f]));
    const action = (label, title, change) => {
      const b = el('button', label, { title, 'data-action': label.toLowerCase() });
      b.addEventListener('click', () => onChange(change));
      sel.appendChild(document.createTextNode(' '));
      sel.appendChild(b);
    };
    action('Focus', 'Show only this function and what it calls, all calls merged',
      { fo: true, z: [], v: state.v === 'icicle' ? 'icicle' : 'flame' });
    action('Sandwich', 'Callers and callees of this function', { v: 'sandwich' });
    if (!state.m.includes(state.f)) {
      action('Merge', 'Remove this function from every stack; its time goes to its callers',
        { m: state.m.concat([state.f]), z: [], fo: false });
    }
    sel.appendChild(document.createTextNode('  '));
    box.appendChild(sel);
  }
  const chip = (text, title, change) => {
    const c = el('button', text + ' ✕', { class: 'chip', title });
    c.addEventListener('click', () => onChange(change));
    box.appendChild(c);
  };
  if (state.fo && state.f >= 0) chip('focus: ' + P.strings[state.f], 'Stop focusing', { fo: false, z: [] });
  for (const m of state.m) {
    chip('merged: ' + P.strings[m], 'Unmerge', { m: state.m.filter((x) => x !== m), z: [] });
  }
  if (state.h.length) chip(state.h.length + ' hidden', 'Show all threads', { h: [] });
  if (P.diff) {
    box.appendChild(el('span', ' red: total share grew, blue: shrank (widths: new)', { class: 'muted' }));
  }
}

const TABLE_LIMIT = 300;

/** The top functions table; `onPick(id, how)` with how 'focus' or 'sandwich'. */
function renderTable(P, stats, sort, showAll, onSort, onPick) {
  const T = stats.tree;
  const all = T.total[0];
  const allB = T.totalB ? T.totalB[0] : 0;
  const share = (a, b) => (b > 0 ? a / b : 0);
  const dSelf = (id) => share(stats.self[id], all) - share(stats.selfB[id], allB);
  const dTotal = (id) => share(stats.total[id], all) - share(stats.totalB[id], allB);
  const cols = [
    ['name', 'Function'],
    ['self', 'Self'],
    ['selfpct', 'Self %'],
    ['total', 'Total'],
    ['totalpct', 'Total %'],
  ];
  if (P.diff) cols.push(['dself', 'Δ self'], ['dtotal', 'Δ total']);
  cols.push(['', '']);
  const head = $('fn-head');
  clear(head);
  for (const [key, label] of cols) {
    const th = el('th', label + (key && sort.key === key ? (sort.asc ? ' ▲' : ' ▼') : ''), { 'data-sort': key });
    if (key) th.addEventListener('click', () => onSort(key));
    head.appendChild(th);
  }
  const keyOf = {
    name: (id) => P.strings[id],
    self: (id) => stats.self[id],
    selfpct: (id) => stats.self[id],
    total: (id) => stats.total[id],
    totalpct: (id) => stats.total[id],
    dself: (id) => (P.diff ? dSelf(id) : 0),
    dtotal: (id) => (P.diff ? dTotal(id) : 0),
  }[sort.key] || ((id) => stats.total[id]);
  const ids = stats.ids.slice();
  const dir = sort.asc ? 1 : -1;
  ids.sort((a, b) => {
    const ka = keyOf(a);
    const kb = keyOf(b);
    if (ka < kb) return -dir;
    if (ka > kb) return dir;
    return stats.total[b] - stats.total[a] || a - b;
  });
  const body = $('fn-body');
  clear(body);
  const shown = showAll ? ids : ids.slice(0, TABLE_LIMIT);
  const frag = document.createDocumentFragment();
  for (const id of shown) {
    const tr = el('tr', null, { 'data-id': String(id) });
    tr.appendChild(el('td', P.strings[id]));
    tr.appendChild(el('td', fmtCount(stats.self[id])));
    tr.appendChild(el('td', fmtPct(stats.self[id], all)));
    tr.appendChild(el('td', fmtCount(stats.total[id])));
    tr.appendChild(el('td', fmtPct(stats.total[id], all)));
    if (P.diff) {
      tr.appendChild(el('td', fmtPp(dSelf(id)), { class: deltaClass(dSelf(id)) }));
      tr.appendChild(el('td', fmtPp(dTotal(id)), { class: deltaClass(dTotal(id)) }));
    }
    const td = el('td');
    const sw = el('button', 'sandwich', { title: 'Callers and callees' });
    sw.addEventListener('click', (e) => {
      e.stopPropagation();
      onPick(id, 'sandwich');
    });
    td.appendChild(sw);
    tr.appendChild(td);
    tr.addEventListener('click', () => onPick(id, 'focus'));
    frag.appendChild(tr);
  }
  body.appendChild(frag);
  const more = $('fn-more');
  more.hidden = shown.length >= ids.length;
  more.textContent = 'Show all ' + ids.length + ' functions';
}

/** Checkboxes per process and thread; `onChange(hiddenIndices)`. */
function renderThreads(P, hidden, onChange) {
  const box = $('threads-list');
  clear(box);
  const hiddenSet = new Set(hidden);
  const byProcess = new Map();
  for (const t of P.threads) {
    const list = byProcess.get(t.process) || [];
    list.push(t);
    byProcess.set(t.process, list);
  }
  const weight = (list) => list.reduce((a, t) => a + P.threadTotal[t.index], 0);
  const procs = [...byProcess.entries()].sort((a, b) => weight(b[1]) - weight(a[1]));
  const all = P.threadTotal.reduce((a, b) => a + b, 0);
  const emit = () => onChange([...hiddenSet].sort((a, b) => a - b));
  for (const [proc, list] of procs) {
    list.sort((a, b) => P.threadTotal[b.index] - P.threadTotal[a.index]);
    const single = list.length === 1 && list[0].label === proc;
    const pl = el('label', null, { class: 'proc' });
    const pc = el('input', null, { type: 'checkbox' });
    pc.checked = list.some((t) => !hiddenSet.has(t.index));
    pc.addEventListener('change', () => {
      for (const t of list) pc.checked ? hiddenSet.delete(t.index) : hiddenSet.add(t.index);
      emit();
    });
    pl.appendChild(pc);
    pl.appendChild(document.createTextNode(' ' + P.strings[proc] + '  '));
    pl.appendChild(el('span', fmtPct(weight(list), all), { class: 'muted' }));
    box.appendChild(pl);
    if (single) continue;
    for (const t of list) {
      const tl = el('label', null, { class: 'thr' });
      const tc = el('input', null, { type: 'checkbox', 'data-thread': String(t.index) });
      tc.checked = !hiddenSet.has(t.index);
      tc.addEventListener('change', () => {
        tc.checked ? hiddenSet.delete(t.index) : hiddenSet.add(t.index);
        emit();
      });
      tl.appendChild(tc);
      tl.appendChild(document.createTextNode(' ' + P.strings[t.label] + '  '));
      tl.appendChild(el('span', fmtPct(P.threadTotal[t.index], all), { class: 'muted' }));
      box.appendChild(tl);
    }
  }
}

/** Metadata of each input and any warnings. */
function renderInfo(P, warnings) {
  const box = $('info');
  clear(box);
  P.info.forEach((lines, k) => {
    if (P.diff) box.appendChild(el('h2', k === 0 ? 'Base' : 'New'));
    const dl = el('dl');
    for (const pair of Array.isArray(lines) ? lines : []) {
      dl.appendChild(el('dt', pair[0]));
      dl.appendChild(el('dd', pair[1]));
    }
    box.appendChild(dl);
  });
  for (const w of warnings || []) box.appendChild(el('p', 'warning: ' + w));
}
