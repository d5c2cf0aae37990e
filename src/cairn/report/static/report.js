(function () {
'use strict';
const D = JSON.parse(document.getElementById('cairn-data').textContent);
const S = D.strings || [];
const PALETTE = ['#2563eb', '#ea580c', '#16a34a', '#dc2626', '#7c3aed', '#0891b2', '#db2777', '#65a30d'];
const TERM_NAMES = {A_E: 'episode level', A_S: 'step level', A_b: 'branch', A_t: 'trajectory'};

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === 'text') el.textContent = v;
    else if (k === 'cls') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'style') el.style.cssText = v;
    else el.setAttribute(k, v);
  }
  for (const c of kids) if (c !== null && c !== undefined) el.append(c);
  return el;
}
const NS = 'http://www.w3.org/2000/svg';
function s(tag, attrs, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}
function num(v, d) {
  if (v === null || v === undefined) return 'n/a';
  if (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3)) return v.toExponential(2);
  return v.toFixed(d === undefined ? 3 : d);
}
function signed(v) {
  if (v === null || v === undefined) return 'n/a';
  if (Math.abs(v) >= 1e4) return (v >= 0 ? '+' : '') + v.toExponential(2);
  const t = v.toFixed(3);
  return (t.startsWith('-') ? (/^-0\.0+$/.test(t) ? '+' + t.slice(1) : t) : '+' + t);
}
function advColour(v, scale) {
  if (v === null || v === undefined) return 'rgb(235,235,235)';
  const x = Math.max(-1, Math.min(1, v / (scale || 1)));
  const end = x >= 0 ? [33, 102, 172] : [178, 24, 43], mid = [247, 247, 247], f = Math.abs(x);
  const c = mid.map((m, i) => Math.round(m + (end[i] - m) * f));
  return 'rgb(' + c.join(',') + ')';
}
function inkFor(v, scale) { return v !== null && v !== undefined && Math.abs(v / (scale || 1)) > 0.55 ? 'lt' : 'dk'; }
function str(i) { return i === undefined || i === null ? '' : S[i]; }

// ---------------------------------------------------------------- charts (inline SVG)
function ticks(lo, hi, n) {
  const span = hi - lo, raw = span / Math.max(1, n), mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(st => span / st <= n) || 10 * mag;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
  return out;
}
function tickText(t) {
  const a = Math.abs(t);
  if (a >= 1e4) return (t / 1000) + 'k';
  return a !== 0 && a < 1e-3 ? t.toExponential(0) : String(+t.toFixed(6));
}
function chart(title, series, opts) {
  opts = opts || {};
  const W = 380, H = 200, L = 46, R = 10, T = 8, B = 28;
  const box = h('div', {cls: 'chart', 'data-title': title}, h('h4', {text: title}));
  const xs = [], ys = [];
  for (const sr of series) {
    xs.push(...sr.x); ys.push(...sr.y.filter(v => v !== null));
    if (sr.lo) ys.push(...sr.lo, ...sr.hi);
  }
  if (opts.hline !== undefined && opts.hline !== null) ys.push(opts.hline);
  if (!xs.length || !ys.length) { box.append(h('div', {cls: 'empty', text: 'no data'})); return box; }
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (opts.ylo !== undefined) y0 = Math.min(y0, opts.ylo);
  if (opts.yhi !== undefined) y1 = Math.max(y1, opts.yhi);
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 + 0.5; y1 += Math.abs(y1) * 0.1 + 0.5; }
  const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
  const X = v => L + (v - x0) / (x1 - x0) * (W - L - R), Y = v => T + (1 - (v - y0) / (y1 - y0)) * (H - T - B);
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title});
  for (const t of ticks(y0, y1, 4)) {
    svg.append(s('line', {x1: L, x2: W - R, y1: Y(t), y2: Y(t), stroke: '#eef0f3'}));
    svg.append(s('text', {x: L - 4, y: Y(t) + 3, 'text-anchor': 'end'}, tickText(t)));
  }
  for (const t of ticks(x0, x1, 5)) {
    svg.append(s('line', {x1: X(t), x2: X(t), y1: T, y2: H - B, stroke: '#f3f4f6'}));
    svg.append(s('text', {x: X(t), y: H - B + 12, 'text-anchor': 'middle'}, tickText(t)));
  }
  svg.append(s('text', {x: (L + W - R) / 2, y: H - 3, 'text-anchor': 'middle'}, opts.xlabel || ''));
  svg.append(s('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: 'none', stroke: '#d0d5dd'}));
  if (opts.hline !== undefined && opts.hline !== null)
    svg.append(s('line', {x1: L, x2: W - R, y1: Y(opts.hline), y2: Y(opts.hline), stroke: '#9ca3af', 'stroke-dasharray': '4 3'}));
  const legend = h('div', {cls: 'legend'});
  series.forEach((sr, i) => {
    const col = sr.color || PALETTE[i % PALETTE.length];
    if (sr.lo) {
      const up = sr.x.map((x, k) => `${X(x)},${Y(sr.hi[k])}`), dn = sr.x.map((x, k) => `${X(x)},${Y(sr.lo[k])}`).reverse();
      svg.append(s('polygon', {points: up.concat(dn).join(' '), fill: col, 'fill-opacity': 0.15, stroke: 'none'}));
    }
    const pts = sr.x.map((x, k) => sr.y[k] === null ? null : `${X(x)},${Y(sr.y[k])}`).filter(Boolean);
    svg.append(s('polyline', {points: pts.join(' '), fill: 'none', stroke: col, 'stroke-width': sr.width || 1.6,
      'stroke-dasharray': sr.dash || '', class: 'series', 'data-name': sr.name}));
    if (sr.points || sr.x.length < 3)
      sr.x.forEach((x, k) => { if (sr.y[k] !== null) svg.append(s('circle', {cx: X(x), cy: Y(sr.y[k]), r: 2.6, fill: col})); });
    if (!sr.nolegend) legend.append(h('span', {}, h('span', {cls: 'sw', style: `background:${col}`}), sr.name));
  });
  const cross = s('line', {y1: T, y2: H - B, stroke: '#6b7280', 'stroke-width': 0.8, visibility: 'hidden'});
  svg.append(cross);
  const tip = h('div', {cls: 'tip'});
  const hit = s('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: 'transparent'});
  hit.addEventListener('mousemove', ev => {
    const r = svg.getBoundingClientRect(), px = (ev.clientX - r.left) * W / r.width;
    const xv = x0 + (px - L) / (W - L - R) * (x1 - x0);
    const lines = [`${opts.xlabel || 'x'}: ${Math.round(xv)}`];
    for (const sr of series) {
      if (sr.nolegend || !sr.x.length) continue;
      let k = 0; for (let j = 1; j < sr.x.length; j++) if (Math.abs(sr.x[j] - xv) < Math.abs(sr.x[k] - xv)) k = j;
      lines.push(`${sr.name}: ${num(sr.y[k], 4)}` + (sr.lo ? `  [${num(sr.lo[k], 3)}, ${num(sr.hi[k], 3)}]` : '') + ` @ ${sr.x[k]}`);
    }
    cross.setAttribute('x1', px); cross.setAttribute('x2', px); cross.setAttribute('visibility', 'visible');
    tip.textContent = lines.join('\n'); tip.style.display = 'block';
    tip.style.left = Math.min(ev.clientX - box.getBoundingClientRect().left + 12, box.clientWidth - 200) + 'px';
    tip.style.top = (ev.clientY - box.getBoundingClientRect().top + 12) + 'px';
  });
  hit.addEventListener('mouseleave', () => { cross.setAttribute('visibility', 'hidden'); tip.style.display = 'none'; });
  svg.append(hit);
  box.append(svg, legend, tip);
  return box;
}
function styled(sr) {
  const ev = sr.name.startsWith('eval/');
  return Object.assign({}, sr, ev ? {color: '#111827', points: true, dash: '4 2', name: sr.name + ' (greedy, held-out)'} : {});
}
function table(columns, rows, fmt) {
  const t = h('table', {cls: 'data'});
  t.append(h('tr', {}, ...columns.map(c => h('th', {text: c}))));
  for (const r of rows) t.append(h('tr', {}, ...r.map((v, i) => h('td', {text: fmt ? fmt(v, i) : String(v)}))));
  return t;
}
function section(id, title, ...kids) { return h('section', {id}, h('h2', {text: title}), ...kids); }

// ---------------------------------------------------------------- run report
function overview() {
  return section('overview', 'Run overview', h('div', {cls: 'kv'},
    ...D.overview.map(([k, v]) => h('div', {}, h('div', {cls: 'k', text: k}), h('div', {cls: 'v', text: v})))));
}
function curvesSection() {
  const C = D.curves, grid = h('div', {cls: 'charts', id: 'curve-grid'});
  for (const p of C.panels) grid.append(chart(p.title, p.series.map(styled), {xlabel: C.xlabel}));
  const sec = section('curves', 'Learning curves', grid);
  if (C.other && C.other.length) {
    const holder = h('div', {cls: 'charts'});
    const pick = h('select', {id: 'other-metric'}, ...C.other.map((sr, i) => h('option', {value: i, text: sr.name})));
    const draw = () => { holder.textContent = ''; const sr = C.other[+pick.value]; holder.append(chart(sr.name, [sr], {xlabel: C.xlabel})); };
    pick.addEventListener('change', draw); draw();
    sec.append(h('div', {cls: 'controls', style: 'margin-top:10px'}, h('label', {text: 'any other metric '}), pick), holder);
  }
  if (C.note) sec.append(h('div', {cls: 'note', text: C.note}));
  return sec;
}
function evalSection() {
  const E = D.evals;
  if (!E.rows.length) return section('evals', 'Evaluations', h('div', {cls: 'empty', text: 'no evaluation yet'}));
  return section('evals', 'Evaluations (greedy, held-out seeds)',
    table(E.columns, E.rows, (v, i) => v === null ? '' : (i < 2 ? String(v) : num(v))));
}

const afterMount = [];
const state = {it: Math.max(0, (D.iterations || []).length - 1), success: 'all', task: 'all', sign: 'all', q: ''};
function trajSection() {
  const sec = section('trajectories', 'Trajectories and credit');
  if (!D.iterations.length) { sec.append(h('div', {cls: 'empty', text: 'no trajectory dump in this run'})); return sec; }
  const itSel = h('select', {id: 'f-iter'}, ...D.iterations.map((it, i) => h('option', {value: i, text: 'iteration ' + it.iteration})));
  itSel.value = state.it;
  const succ = h('select', {id: 'f-success'}, ...['all', 'success', 'failure'].map(v => h('option', {value: v, text: v})));
  const task = h('select', {id: 'f-task'});
  const sign = h('select', {id: 'f-sign'}, ...[['all', 'any advantage'], ['pos', 'A > 0'], ['neg', 'A < 0'], ['zero', 'A = 0']].map(([v, t]) => h('option', {value: v, text: t})));
  const q = h('input', {type: 'search', id: 'f-search', placeholder: 'search observation, action, tips'});
  const count = h('span', {cls: 'note', id: 'f-count'});
  const bar = h('div', {cls: 'legendbar'}, h('span', {text: 'A ≤ ' + num(-D.scale, 2)}), h('span', {cls: 'bar'}),
    h('span', {text: 'A ≥ +' + num(D.scale, 2)}));
  const termsNote = D.terms.length ? 'strips under each turn: ' + D.terms.map(p => p + (TERM_NAMES[p] ? ' (' + TERM_NAMES[p] + ')' : '')).join(', ') : '';
  sec.append(h('div', {cls: 'controls'},
    h('label', {}, 'show ', itSel), h('label', {}, 'episodes ', succ), h('label', {}, 'task ', task),
    h('label', {}, 'turns ', sign), q, count));
  sec.append(h('div', {cls: 'controls'}, bar,
    h('span', {cls: 'note', text: 'red: negative advantage (blame), blue: positive (credit); hover a turn for exact values; click it to highlight its step group' + (D.tau ? ' and its nearest neighbours (dashed)' : '') + '. ' + termsNote})));
  sec.append(h('div', {cls: 'note', id: 'sampling', text: `Sampling: ${D.sampling.rule} This report shows iterations ${D.sampling.shown.join(', ')} of ${D.sampling.dumped} dumped.` + (D.sampling.skipped ? ` ${D.sampling.skipped} unreadable lines skipped.` : '')}));
  const body = h('div', {id: 'iteration'});
  sec.append(body);
  itSel.addEventListener('change', () => { state.it = +itSel.value; state.task = 'all'; renderIteration(body, task); });
  succ.addEventListener('change', () => { state.success = succ.value; applyFilters(); });
  task.addEventListener('change', () => { state.task = task.value; applyFilters(); });
  sign.addEventListener('change', () => { state.sign = sign.value; applyFilters(); });
  q.addEventListener('input', () => { state.q = q.value.trim().toLowerCase(); applyFilters(); });
  afterMount.push(() => renderIteration(body, task));
  return sec;
}
function renderIteration(body, taskSel) {
  const it = D.iterations[state.it];
  body.textContent = '';
  closeDetail();
  const tasks = [...new Set(it.groups.map(g => g.task))];
  taskSel.textContent = '';
  taskSel.append(h('option', {value: 'all', text: 'all'}), ...tasks.map(t => h('option', {value: String(t), text: String(t)})));
  const shownEp = it.groups.reduce((a, g) => a + g.episodes.length, 0);
  body.append(h('div', {cls: 'note', text: `iteration ${it.iteration}: ${it.groups.length} of ${it.groups_total} dumped groups, ${shownEp} of ${it.episodes_total} dumped episodes`}));
  it.groups.forEach((g, gi) => body.append(groupCard(g, gi)));
  applyFilters();
}
function groupCard(g, gi) {
  const card = h('div', {cls: 'group', 'data-grp': gi, 'data-task': String(g.task)});
  card.append(h('div', {cls: 'gh'}, `group ${g.group} `, h('span', {text:
    `task ${g.task} · ${g.episodes.length} episodes · success ${num(g.success_rate, 2)} · ${g.step_groups} step groups (${g.singletons} singletons)` +
    (g.similarity ? ` · neighbours: ${g.similarity}, tau ${D.tau}` : '')})));
  if (g.tree) card.append(treeView(g, gi));
  for (const ep of g.episodes) card.append(episodeRow(g, gi, ep));
  return card;
}
function episodeRow(g, gi, ep) {
  const row = h('div', {cls: 'episode' + (ep.source === 1 ? ' demo' : ''), 'data-ep': ep.id, 'data-success': ep.success ? '1' : '0'});
  const head = h('div', {cls: 'ephead'},
    h('span', {cls: 'id', text: '#' + ep.id + ' '}), h('span', {cls: ep.success ? 'ok' : 'bad', text: ep.success ? '✓' : '✗'}),
    h('div', {text: 'R ' + signed(ep.return) + ' · ' + ep.steps.length + ' turns'}));
  if (ep.source === 1) head.append(h('span', {cls: 'badge demo', text: 'demonstration · off-policy', title: 'source 1: an off-policy demonstration (LUFFY)'}));
  if (ep.source === 2) head.append(h('span', {cls: 'badge mem', text: 'memory-guided', title: 'source 2: rolled out with tips from memory (EMPO2)'}));
  if (ep.truncated) head.append(h('span', {cls: 'badge trunc', text: 'truncated'}));
  if (ep.tips) head.append(h('span', {cls: 'badge mem', text: ep.tips.length + ' tips', title: ep.tips.map(str).join('\n')}));
  if (ep.path && ep.path.length) head.append(h('span', {cls: 'badge', text: 'path ' + ep.path.join('.')}));
  if (ep.t_crit !== null && ep.t_crit !== undefined) head.append(h('span', {cls: 'badge trunc', text: 'error at t=' + ep.t_crit}));
  const meta = ep.meta || {};
  if (meta.context_dropped && meta.context_dropped.length) head.append(h('span', {cls: 'badge trunc', text: 'context cut: ' + meta.context_dropped.map(([t, n]) => `t=${t} -${n}`).join(', '), title: 'oldest turns dropped from the prompt to fit the context budget (rollout/context_truncated): turn, turns dropped'}));
  if (meta.format_errors && meta.format_errors.length) head.append(h('span', {cls: 'badge trunc', text: meta.format_errors.length + ' format errors', title: 'turns with no parsable action: ' + meta.format_errors.join(', ')}));
  if (meta.truncated_actions && meta.truncated_actions.length) head.append(h('span', {cls: 'badge trunc', text: meta.truncated_actions.length + ' cut at max_new_tokens', title: 'turns: ' + meta.truncated_actions.join(', ')}));
  if (meta.end_reason) head.append(h('span', {cls: 'badge trunc', text: 'ended: ' + meta.end_reason}));
  const turns = h('div', {cls: 'turns'});
  for (const st of ep.steps) turns.append(turnCell(g, gi, ep, st));
  row.append(head, turns);
  return row;
}
function turnTitle(g, ep, st) {
  const lines = [`episode #${ep.id}, turn t=${st.t}`, `action: ${str(st.x)}`, `advantage A = ${st.A === null ? 'n/a' : st.A}`];
  for (const [k, v] of Object.entries(st.q || {})) lines.push(`${k} = ${v}` + (TERM_NAMES[k] ? ` (${TERM_NAMES[k]})` : ''));
  for (const [k, v] of Object.entries(st.k || {})) lines.push(`${k} = ${v}`);
  lines.push(`reward ${st.r}` + (st.p ? `, penalty ${st.p}` : '') + (st.sh ? `, shaped ${st.sh}` : '') + (st.ok === 0 ? ' (invalid action)' : ''));
  if (st.crit) lines.push('crit: at or after the first irrecoverable step');
  return lines.join('\n');
}
function turnCell(g, gi, ep, st) {
  const cls = 'turn ' + inkFor(st.A, D.scale) + (st.ok === 0 ? ' invalid' : '') + (ep.t_crit === st.t ? ' crit' : '');
  const cell = h('div', {cls, 'data-grp': gi, 'data-anc': st.a, 'data-ep': ep.id, 'data-t': st.t,
    'data-adv': st.A === null ? '' : st.A, title: turnTitle(g, ep, st), style: 'background:' + advColour(st.A, D.scale)},
    h('div', {cls: 'tt', text: 't' + st.t + (st.A === null ? '' : ' · ' + signed(st.A))}),
    h('div', {cls: 'act', text: str(st.x)}),
    h('div', {cls: 'rw', text: 'r ' + signed(st.r - (st.p || 0) + (st.sh || 0))}));
  const marks = (ep.t_crit === st.t ? '⚑' : '') + (st.tips ? '✎' : '') + (st.ok === 0 ? '✗' : '');
  if (marks) cell.append(h('span', {cls: 'mk', text: marks}));
  if (D.terms.length) {
    const strips = h('div', {cls: 'strips'});
    for (const p of D.terms) if (st.q && p in st.q)
      strips.append(h('div', {cls: 'strip', 'data-term': p, style: 'background:' + advColour(st.q[p], D.scale)}));
    cell.append(strips);
  }
  cell.addEventListener('click', ev => { ev.stopPropagation(); select(cell, g, gi, ep, st); });
  return cell;
}
function clearSelection() {
  document.querySelectorAll('.turn.sel, .turn.same, .turn.near').forEach(c => {
    c.classList.remove('sel', 'same', 'near'); c.style.outlineColor = '';
  });
}
function select(cell, g, gi, ep, st) {
  clearSelection();
  const same = document.querySelectorAll(`.turn[data-grp="${gi}"][data-anc="${st.a}"]`);
  same.forEach(c => c.classList.add('same'));
  cell.classList.add('sel');
  const near = (g.neighbours && g.neighbours[String(st.a)]) || [];
  const wmax = Math.max(1e-12, ...near.filter(n => n[0] !== st.a).map(n => n[1]));
  for (const [b, w] of near) {
    if (b === st.a) continue;
    document.querySelectorAll(`.turn[data-grp="${gi}"][data-anc="${b}"]`).forEach(c => {
      c.classList.add('near'); c.style.outlineColor = `rgba(124,58,237,${0.25 + 0.75 * w / wmax})`;
    });
  }
  showDetail(g, gi, ep, st, same.length, near);
}
function kvTable(obj) {
  return h('table', {}, ...Object.entries(obj).map(([k, v]) => h('tr', {}, h('td', {text: k}), h('td', {text: typeof v === 'number' ? String(v) : JSON.stringify(v)}))));
}
function showDetail(g, gi, ep, st, nSame, near) {
  const box = document.getElementById('detail');
  box.textContent = '';
  box.append(h('button', {cls: 'close', text: '×', title: 'close', onclick: closeDetail}));
  box.append(h('h3', {text: `group ${g.group} · episode #${ep.id} · turn t=${st.t}`}));
  const adv = h('span', {cls: 'chip ' + inkFor(st.A, D.scale), style: 'background:' + advColour(st.A, D.scale), text: st.A === null ? 'n/a' : String(st.A)});
  box.append(h('div', {}, 'advantage ', adv));
  const vals = {reward: st.r};
  if (st.p) vals.penalty = st.p;
  vals.valid = st.ok !== 0;
  if (st.lp !== null) vals['log-prob of the action'] = st.lp;
  Object.assign(vals, st.q || {}, st.k || {});
  box.append(kvTable(vals));
  box.append(h('div', {cls: 'note', text: `step group (same anchor in this group): ${nSame} turns` + (nSame === 1 ? ' (a singleton: no step-level signal from exact grouping)' : '')}));
  if (ep.t_crit === st.t) box.append(h('div', {cls: 'bad', text: '⚑ localised first irrecoverable step (crit)'}));
  const prompt = promptOf(ep, st);
  if (prompt !== null) {  // what the model saw: the rendered prompt, collapsed by default
    box.append(h('details', {cls: 'prompt'}, h('summary', {text: `prompt the model saw (${prompt.length} characters)`}), h('pre', {text: prompt})));
  }
  box.append(h('div', {text: 'observation'}), h('pre', {text: str(st.o)}));
  if (st.a !== st.o) box.append(h('div', {text: 'anchor (grouping key)'}), h('pre', {text: str(st.a)}));
  box.append(h('div', {text: 'action'}), h('pre', {text: str(st.x)}));
  if (st.c !== undefined) box.append(h('div', {text: 'completion'}), h('pre', {text: str(st.c)}));
  const tips = (st.tips || []).concat(ep.tips || []);
  if (tips.length) box.append(h('div', {text: 'tips in the prompt'}), h('pre', {text: tips.map(str).join('\n')}));
  if (st.e) box.append(h('div', {text: 'other fields'}), kvTable(st.e));
  if (near.length) {
    box.append(h('div', {text: `nearest anchors by similarity weight (${g.similarity}, tau ${D.tau}; IDF fitted on this group, so an approximation of training's): weight per step × steps`}));
    const obsOf = b => { for (const e of g.episodes) for (const x of e.steps) if (x.a === b) return str(x.o); return str(b); };
    box.append(table(['anchor (observation of a turn there)', 'weight/step', 'steps'], near.map(([b, w, n]) => [(b === st.a ? '(this anchor) ' : '') + obsOf(b).replace(/\s+/g, ' ').slice(0, 70), w, n]),
      (v, i) => i === 1 ? num(v, 4) : String(v)));
  }
  box.style.display = 'block';
}
// The prompt text of step st: each step keeps pk characters of the step before's prompt,
// then its pl characters from pf, then adds string pa (what repeats is stored once per
// episode); null where none was kept.
function promptOf(ep, st) {
  let text = '';
  for (const x of ep.steps) {
    if (x.pk === undefined) { text = null; if (x === st) return null; continue; }
    const prev = text || '';
    text = prev.slice(0, x.pk) + (x.pl ? prev.slice(x.pf, x.pf + x.pl) : '') + str(x.pa);
    if (x === st) return text;
  }
  return null;
}
function closeDetail() { const b = document.getElementById('detail'); if (b) b.style.display = 'none'; clearSelection(); }
function stepMatches(st, ep) {
  if (state.sign === 'pos' && !(st.A > 0)) return false;
  if (state.sign === 'neg' && !(st.A < 0)) return false;
  if (state.sign === 'zero' && st.A !== 0) return false;
  if (state.q) {
    const hay = [st.o, st.a, st.x, st.c].map(str).join('\n') + (st.tips || []).concat(ep.tips || []).map(str).join('\n');
    if (!hay.toLowerCase().includes(state.q)) return false;
  }
  return true;
}
function applyFilters() {
  const it = D.iterations[state.it];
  let shown = 0, total = 0;
  document.querySelectorAll('#iteration .group').forEach(card => {
    const g = it.groups[+card.dataset.grp];
    const taskOk = state.task === 'all' || String(g.task) === state.task;
    let visible = 0;
    card.querySelectorAll('.episode').forEach((row, k) => {
      const ep = g.episodes[k];
      total++;
      let ok = taskOk && (state.success === 'all' || (state.success === 'success') === ep.success);
      let any = false;
      row.querySelectorAll('.turn').forEach((cell, j) => {
        const m = stepMatches(ep.steps[j], ep);
        any = any || m;
        cell.classList.toggle('dim', (state.sign !== 'all' || !!state.q) && !m);
        cell.classList.toggle('hit', !!state.q && m);
      });
      if (state.sign !== 'all' || state.q) ok = ok && any;
      row.classList.toggle('hidden', !ok);
      if (ok) { visible++; shown++; }
    });
    card.style.display = visible ? '' : 'none';
  });
  document.getElementById('f-count').textContent = `${shown} of ${total} episodes shown`;
}
function treeView(g, gi) {
  const T = g.tree, colW = 170, rowH = 26, padL = 16, padT = 14;
  const rows = Math.max(...T.nodes.map(n => n.y)) + 1;
  const W = padL + (T.depth + 1) * colW + 140, H = padT * 2 + rows * rowH;
  const svg = s('svg', {width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: 'treesvg'});
  const P = n => [padL + 10 + n.depth * colW, padT + n.y * rowH + rowH / 2];
  const byId = Object.fromEntries(T.nodes.map(n => [n.id, n]));
  const vals = T.nodes.map(n => n.V), vlo = Math.min(...vals), vhi = Math.max(...vals);
  const mid = (vlo + vhi) / 2, half = Math.max(1e-9, (vhi - vlo) / 2);
  for (const n of T.nodes) {
    if (n.parent < 0) continue;
    const [x0, y0] = P(byId[n.parent]), [x1, y1] = P(n);
    svg.append(s('path', {d: `M${x0},${y0} C${(x0 + x1) / 2},${y0} ${(x0 + x1) / 2},${y1} ${x1},${y1}`, fill: 'none', stroke: '#cbd5e1', 'stroke-width': 1.5}));
  }
  for (const n of T.nodes) {
    const [x, y] = P(n);
    const ep = g.episodes;
    const acts = n.steps.map(([t, i, j]) => str(ep[i].steps[j].x)).join(' → ');
    const title = `node ${n.path.length ? n.path.join('.') : 'root'}\nV = ${num(n.V, 4)} (mean return of the leaves below, bottom-up)\nleaves ${n.leaves}, successes ${n.wins}` +
      (n.steps.length ? `\nturns t=${n.steps[0][0]}..${n.steps[n.steps.length - 1][0]}: ${acts}` : '') + (n.crit ? '\n⚑ localised error step here' : '');
    const c = s('circle', {cx: x, cy: y, r: 7, fill: advColour(n.V - mid, half), stroke: n.crit ? '#dc2626' : '#475569', 'stroke-width': n.crit ? 3 : 1, class: 'node' + (n.crit ? ' crit' : '')});
    c.append(s('title', {}, title));
    if (n.episode !== null) c.addEventListener('click', () => {
      const row = document.querySelector(`.group[data-grp="${gi}"] .episode[data-ep="${n.episode}"]`);
      if (row) { row.scrollIntoView({block: 'center'}); row.querySelector('.turn') && row.querySelector('.turn').click(); }
    });
    svg.append(c);
    const label = `V ${signed(n.V)}` + (n.episode !== null ? `  #${n.episode} ${n.wins ? '✓' : '✗'}` : '') + (n.crit ? '  ⚑' : '');
    svg.append(s('text', {x: x + 10, y: y - 3}, label));
    if (acts) svg.append(s('text', {x: x + 10, y: y + 9, fill: '#6b7280'}, acts.length > 26 ? acts.slice(0, 25) + '…' : acts));
  }
  return h('div', {cls: 'tree', title: ''}, h('div', {cls: 'note', style: 'margin:4px 8px', text:
    `rollout tree: node colour = value V (red low, blue high within this group); red ring ⚑ = localised error step; ` +
    (T.exact ? 'steps placed by their own path' : 'steps placed by the shared prefix of the leaves below (inferred)')}), svg);
}
function configSection() {
  return section('config', 'Configuration (config.yaml)', h('pre', {cls: 'config', text: D.config_text || '(no config.yaml)'}));
}

// ---------------------------------------------------------------- compare report
function compareReport(main) {
  main.append(section('table', 'Episodes to target and final success',
    table(D.table.columns, D.table.rows, v => v === null ? '-' : String(v))));
  const grid = h('div', {cls: 'charts', id: 'curve-grid'});
  const series = [];
  D.configs.forEach((c, i) => {
    const col = PALETTE[i % PALETTE.length];
    series.push({name: `${c.name} (${c.seeds} seeds)`, x: c.grid, y: c.mean, lo: c.lo, hi: c.hi, color: col, width: 2});
    c.per_seed.forEach(p => series.push({name: c.name, x: p.x, y: p.y, color: col, width: 0.7, dash: '3 3', nolegend: true}));
  });
  grid.append(chart('greedy success on held-out seeds: mean over seeds, band = min..max', series, {xlabel: 'training episodes', ylo: 0, yhi: 1, hline: D.target}));
  grid.append(finalChart());
  main.append(section('curves', 'Learning curves', grid));
}
function finalChart() {
  const W = 380, H = 200, L = 46, R = 10, T = 8, B = 40, n = D.configs.length;
  const box = h('div', {cls: 'chart'}, h('h4', {text: 'final greedy success: mean ± 95% CI over seeds'}));
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`});
  const X = i => L + (i + 0.5) / n * (W - L - R), Y = v => T + (1 - v) * (H - T - B);
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    svg.append(s('line', {x1: L, x2: W - R, y1: Y(t), y2: Y(t), stroke: '#eef0f3'}));
    svg.append(s('text', {x: L - 4, y: Y(t) + 3, 'text-anchor': 'end'}, t.toFixed(2)));
  }
  D.configs.forEach((c, i) => {
    const col = PALETTE[i % PALETTE.length], ci = c.ci95 || 0;
    svg.append(s('line', {x1: X(i), x2: X(i), y1: Y(Math.min(1, c.final_mean + ci)), y2: Y(Math.max(0, c.final_mean - ci)), stroke: col, 'stroke-width': 2}));
    const dot = s('circle', {cx: X(i), cy: Y(c.final_mean), r: 4.5, fill: col});
    dot.append(s('title', {}, `${c.name}: ${num(c.final_mean)}` + (c.ci95 === null ? '' : ` ± ${num(c.ci95)}`) + `\nper seed: ${c.finals.map(v => num(v)).join(', ')}`));
    svg.append(dot);
    c.finals.forEach(v => svg.append(s('circle', {cx: X(i) + 9, cy: Y(v), r: 2, fill: col, 'fill-opacity': 0.5})));
    svg.append(s('text', {x: X(i), y: H - B + 14, 'text-anchor': 'middle'}, c.name.length > 18 ? c.name.slice(0, 17) + '…' : c.name));
  });
  svg.append(s('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: 'none', stroke: '#d0d5dd'}));
  box.append(svg);
  return box;
}

// ---------------------------------------------------------------- page
const main = document.getElementById('main');
if (D.kind === 'compare') compareReport(main);
else {
  main.append(overview(), curvesSection(), evalSection(), trajSection(), configSection());
  afterMount.forEach(f => f());
  document.addEventListener('keydown', ev => { if (ev.key === 'Escape') closeDetail(); });
}
document.body.dataset.ready = '1';
})();
