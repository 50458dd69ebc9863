// gpumem viz, fourth part: the controls, zoom and pan, the tooltip, the details of the allocation
// clicked, and the words around the charts.

function relayout() { S.L = layout(S.ci, S.lanes, S.shown); }

let drawPending = false;
function drawAll() { drawTimeline(); drawOverview(); }
function redraw() { // at the next frame, or at once for the self-test, which reads what it drew
  if (SELFTEST) return drawAll();
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; drawAll(); });
}

function setView(v0, v1) {
  const end = domainEnd(), least = S.axis === 'time' ? Math.min(1000, end) : Math.min(4, end);
  let span = Math.min(Math.max(v1 - v0, least), end);
  v0 = Math.min(Math.max(v0, 0), end - span);
  S.view = [v0, v0 + span];
  redraw();
}
function zoomAround(v, factor) { setView(v - (v - S.view[0]) * factor, v + (S.view[1] - v) * factor); }
function panBy(fraction) {
  const d = (S.view[1] - S.view[0]) * fraction;
  setView(S.view[0] + d, S.view[1] + d);
}
function whole() { setView(0, domainEnd()); }
function peakX(cfg) { return S.axis === 'time' ? cfg.peak_live_ns : cfg.peak_live_record; }
function toPeak() {
  const end = domainEnd(), span = Math.max(end * 0.04, S.axis === 'time' ? 1000 : 20), x = peakX(D.configs[S.ci]);
  setView(x - span / 2, x + span / 2);
}

// Records to time and back, along the configuration's series (every row carries both).
function convert(v, from, to) {
  const rows = D.configs[S.ci].series.concat([[END, END_NS]]);
  const k = Math.max(rowAt(rows, v, from), 0), a = rows[k], b = rows[Math.min(k + 1, rows.length - 1)];
  if (b[from] === a[from]) return a[to];
  return a[to] + ((v - a[from]) / (b[from] - a[from])) * (b[to] - a[to]);
}

function local(e, canvas) {
  const r = canvas.getBoundingClientRect();
  return [e.clientX - r.left, e.clientY - r.top];
}

function showTooltip(lines, e) { // fixed to the window, beside the pointer
  const tip = $('tooltip');
  tip.replaceChildren(...lines);
  tip.hidden = false;
  const below = e.clientY + 16 + tip.offsetHeight < window.innerHeight;
  tip.style.left = Math.max(Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 4), 0) + 'px';
  tip.style.top = (below ? e.clientY + 16 : Math.max(e.clientY - tip.offsetHeight - 8, 0)) + 'px';
}

function chartTooltip(hit) {
  const cfg = D.configs[S.ci], c = col(), lines = [];
  if (hit.band) {
    const b = hit.band.block;
    lines.push(el('div', null, el('b', human(b.size)), ' (' + exact(b.size) + ') on stream ' + streamName(b.stream)));
    lines.push(el('div', 'allocated at ' + when(b.a, b.ta) + '; ' + (b.f >= 0 ? 'freed at ' + when(b.f, b.tf) : 'not freed in the trace')));
    lines.push(el('div', b.stack >= 0 ? 'called from ' + D.frames[D.stacks[b.stack][0]] : 'no call stack recorded'));
    lines.push(el('div', 'click for its details and its segment'));
  } else if (hit.other) {
    lines.push(el('div', null, el('b', 'other'), ': ' + human(hit.bytes) + ' of allocations too small for a band of their own (' + hit.other.label + ')'));
  }
  const where = S.axis === 'time' ? duration(hit.x) : 'record ' + count(Math.floor(hit.x));
  lines.push(el('div', where + ': live ' + human(valueAt(cfg.series, hit.x, c, 2)) + '; reserved ' +
    D.configs.map(k => k.name + ' ' + human(valueAt(k.series, hit.x, c, 3))).join(', ')));
  return lines;
}

function onChartMove(e) {
  const canvas = $('timeline'), [px, py] = local(e, canvas);
  if (S.drag) return;
  const hit = hitTest(px, py);
  S.hover = hit;
  if (!hit) { $('tooltip').hidden = true; return; }
  showTooltip(chartTooltip(hit), e);
}

function onWindowMove(e) {
  if (!S.drag) return;
  const [px] = local(e, S.drag.canvas);
  S.drag.to = px;
  if (S.drag.mode === 'pan') {
    const g = S.drag.canvas === $('overview') ? S.overview : S.g;
    const scale = S.drag.canvas === $('overview') ? -domainEnd() / (g.x1 - g.x0) : (S.drag.view[1] - S.drag.view[0]) / (g.x1 - g.x0);
    const d = (S.drag.from - px) * scale;
    S.view = S.drag.view.slice();
    setView(S.drag.view[0] + d, S.drag.view[1] + d);
  } else {
    redraw();
  }
}

function onWindowUp() {
  const drag = S.drag;
  if (!drag) return;
  S.drag = null;
  if (drag.mode === 'select' && Math.abs(drag.to - drag.from) > 4) {
    S.dragged = true;
    setView(vx(Math.min(drag.from, drag.to)), vx(Math.max(drag.from, drag.to)));
  } else {
    redraw();
  }
}

function onChartClick(e) {
  if (S.dragged) { S.dragged = false; return; }
  const [px, py] = local(e, $('timeline')), hit = hitTest(px, py);
  select(hit && hit.band ? hit.band.block.i : null);
}

function select(block) {
  S.selected = block;
  renderDetails();
  redraw();
  drawSegments();
}

function segmentText(cfg, b) {
  const k = cfg.block_segments[b.i];
  if (!cfg.segments.length) return 'none: ' + cfg.name + ' is not a pool; the allocation is a block of its own from the device';
  if (k < 0) return 'not known: the pool gave its segment back before the peak and before the end';
  const [start, size] = cfg.segments[k], row = cfg.map ? cfg.map.rows.findIndex(r => r.start === start) : -1;
  const offset = Number(BigInt(cfg.addresses[b.i]) - BigInt(start));
  return start + ', ' + both(size) + ', at offset ' + exact(offset) + (row >= 0
    ? '; row ' + (row + 1) + ' of the segment map below'
    : '; not among the rows of the segment map (held then by fewer bytes, or not at the peak)');
}

function detailRow(name, value) { return el('tr', null, el('th', name), el('td', value)); }

// Why a block has no stack: none where others have one; else what the format holds.
function noStackWhy() {
  if (D.format === 'PyTorch snapshot' || D.stacks.length) return '';
  if (D.format === 'gpumem trace') return ' (a gpumem trace carries none unless recorded with frames: docs/traces.md)';
  return ' (' + article(D.format) + ' carries none; a PyTorch snapshot does)';
}

function renderDetails() {
  const box = $('details'), cfg = D.configs[S.ci];
  if (S.selected === null) {
    box.replaceChildren(el('p', 'Click a band for its allocation: size, stream, times, call stack and segment.'));
    box.firstChild.className = 'hint';
    return;
  }
  const b = BLOCKS[S.selected], made = cfg.addresses[b.i] !== null, rows = el('table');
  rows.append(detailRow('size', both(b.size)), detailRow('stream', streamName(b.stream)),
    detailRow('allocated', 'at ' + when(b.a, b.ta) + ', by thread ' + b.thread),
    detailRow('freed', b.f >= 0 ? 'at ' + when(b.f, b.tf) + ', ' + duration(b.tf - b.ta) + ' and ' + plural(b.f - b.a, 'record') + ' later' : 'not in the trace'),
    detailRow('in ' + cfg.name, made ? 'at ' + cfg.addresses[b.i] : 'not made: out of memory, or refused, in this configuration'));
  if (made) rows.append(detailRow('segment', segmentText(cfg, b)));
  const live = b.a <= cfg.peak_reserved_record && (b.f < 0 || b.f > cfg.peak_reserved_record);
  rows.append(detailRow('at the peak', live && made ? 'live when reserved bytes peaked' : 'not live when reserved bytes peaked'));
  const stack = b.stack >= 0
    ? el('ol', null, ...D.stacks[b.stack].map(f => el('li', D.frames[f])))
    : el('p', 'no call stack recorded' + noStackWhy());
  box.replaceChildren(el('h3', human(b.size) + ' on stream ' + streamName(b.stream)), rows,
    el('h3', b.stack >= 0 ? 'call stack (the innermost call first)' : 'call stack'), stack);
}

function renderPeaks() {
  const box = $('peaks');
  box.replaceChildren(...D.configs.map((cfg, k) => {
    const line = el('div', null, el('span', null), cfg.allocs
      ? cfg.name + ': peak live ' + both(cfg.peak_live) + ' at ' + when(cfg.peak_live_record, cfg.peak_live_ns) +
        '; peak reserved ' + both(cfg.peak_reserved) + ' at ' + when(cfg.peak_reserved_record, cfg.peak_reserved_ns) +
        (cfg.failed + cfg.refused ? '; ' + plural(cfg.failed + cfg.refused, 'allocation') + ' failed' : '')
      : cfg.name + ': nothing allocated');
    line.firstChild.className = 'swatch';
    line.firstChild.style.background = configColour(k);
    if (k === S.ci) line.style.fontWeight = '600';
    return line;
  }));
}

function renderFacts() {
  const n = D.bands.allocations;
  $('facts').textContent = plural(END, 'record') + ' over ' + duration(END_NS) + '; ' + plural(n, 'allocation') + ' on ' +
    plural(D.streams.length, 'stream') + (D.device !== undefined ? ', device ' + D.device + ' of the snapshot' : '') +
    '; a device of ' + human(D.device_memory) + '.';
  if (D.recorded) $('facts').textContent += ' As recorded, ' + D.recorded.allocator + ' held at most ' + human(D.recorded.peak_reserved) + '.';
}

function renderBandsNote() {
  const b = D.bands, notes = [];
  if (!b.allocations) notes.push('The trace has no allocations.');
  else if (b.drawn === b.allocations) notes.push(b.allocations === 1 ? 'The one allocation is a band of its own.'
    : 'Each of the ' + plural(b.allocations, 'allocation') + ' is a band of its own.');
  else {
    const one = b.drawn === 1, rest = b.allocations - b.drawn;
    notes.push((one ? 'The largest' : 'The ' + count(b.drawn) + ' largest') + ' of ' + count(b.allocations) + ' allocations ' +
      (one ? 'is a band of its own' : 'are bands of their own') + ' (--bands ' + count(b.limit) + '); the other ' + count(rest) +
      ', of ' + human(b.smallest) + ' or less, ' + (rest === 1 ? 'is' : 'are') + ' summed per stream in the grey band "other", on top of each stack.');
  }
  if (D.configs.some(c => c.series_bucketed)) notes.push('Memory over time has more than ' + count(b.max_points) +
    ' steps: the lines are drawn at their highest over each of ' + count(b.buckets) + ' equal runs of records.');
  if (D.configs.some(c => c.other_bucketed)) notes.push('So is the band "other", over runs as many times longer as there are streams (up to 16).');
  notes.push('The lines are each configuration\'s reserved bytes (dashed: the configurations not drawn in bands).');
  $('bands-note').textContent = notes.join(' ');
}

function buildControls() {
  const buttons = $('config-buttons');
  D.configs.forEach((cfg, k) => {
    const button = el('button', null, el('span', null), cfg.name);
    button.type = 'button';
    button.className = 'config-button';
    button.firstChild.className = 'swatch';
    button.firstChild.style.background = configColour(k);
    button.setAttribute('aria-pressed', String(k === S.ci));
    button.addEventListener('click', () => chooseConfig(k));
    buttons.append(' ', button);
  });
  const filter = $('stream-filter');
  D.streams.forEach((s, k) => {
    const box = el('input'), swatch = el('span'), n = BLOCKS.filter(b => b.stream === k).length;
    box.type = 'checkbox';
    box.checked = true;
    box.dataset.stream = k;
    swatch.className = 'swatch';
    swatch.style.background = streamColour(k);
    box.addEventListener('change', () => {
      if (box.checked) S.shown.add(k); else S.shown.delete(k);
      relayout();
      redraw();
    });
    filter.append(el('label', null, box, swatch, streamName(k) + ' (' + plural(n, 'band') + ')'));
  });
  if (!END_NS) document.querySelector('input[name=axis][value=time]').disabled = true;
}

function chooseConfig(k) {
  S.ci = k;
  document.querySelectorAll('.config-button').forEach((b, i) => b.setAttribute('aria-pressed', String(i === k)));
  relayout();
  renderPeaks();
  renderDetails();
  redraw();
  drawSegments();
}

function onRadio(e) {
  const t = e.target;
  if (t.name === 'axis' && t.value !== S.axis) {
    const from = col(), v = S.view.map(x => convert(x, from, 1 - from));
    S.axis = t.value;
    setView(v[0], v[1]);
  }
  if (t.name === 'layout') { S.lanes = t.value === 'lanes'; relayout(); redraw(); }
  if (t.name === 'colour') { S.byStream = t.value === 'stream'; redraw(); drawSegments(); }
}

function onKey(e) {
  const keys = {'+': () => zoomAround((S.view[0] + S.view[1]) / 2, 0.7), '=': () => zoomAround((S.view[0] + S.view[1]) / 2, 0.7),
    '-': () => zoomAround((S.view[0] + S.view[1]) / 2, 1 / 0.7), ArrowLeft: () => panBy(-0.2), ArrowRight: () => panBy(0.2), 0: whole};
  if (!keys[e.key]) return;
  e.preventDefault();
  keys[e.key]();
}

function attach() {
  const chart = $('timeline'), strip = $('overview'), map = $('segments');
  chart.addEventListener('wheel', e => {
    e.preventDefault();
    const [px] = local(e, chart);
    if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)) return panBy((e.deltaX || e.deltaY) / 1000);
    zoomAround(vx(px), Math.exp(e.deltaY * 0.0015));
  }, {passive: false});
  chart.addEventListener('mousedown', e => {
    if (e.button !== 0) return;
    const [px] = local(e, chart);
    S.drag = {canvas: chart, mode: e.shiftKey ? 'pan' : 'select', from: px, to: px, view: S.view.slice()};
    e.preventDefault();
  });
  strip.addEventListener('mousedown', e => {
    const [px] = local(e, strip), g = S.overview, v = ((px - g.x0) / (g.x1 - g.x0)) * domainEnd(), half = (S.view[1] - S.view[0]) / 2;
    setView(v - half, v + half);
    S.drag = {canvas: strip, mode: 'pan', from: px, to: px, view: S.view.slice()};
    e.preventDefault();
  });
  chart.addEventListener('mousemove', onChartMove);
  chart.addEventListener('mouseleave', () => { $('tooltip').hidden = true; });
  chart.addEventListener('click', onChartClick);
  chart.addEventListener('dblclick', whole);
  chart.addEventListener('keydown', onKey);
  window.addEventListener('mousemove', onWindowMove);
  window.addEventListener('mouseup', onWindowUp);
  window.addEventListener('resize', () => { drawAll(); drawSegments(); });
  document.querySelectorAll('input[type=radio]').forEach(r => r.addEventListener('change', onRadio));
  $('whole').addEventListener('click', whole);
  $('to-peak').addEventListener('click', toPeak);
  map.addEventListener('mousemove', e => {
    const [px, py] = local(e, map), hit = mapHit(px, py);
    if (!hit) { $('tooltip').hidden = true; return; }
    showTooltip(mapTooltip(hit[0], hit[1]), e);
  });
  map.addEventListener('mouseleave', () => { $('tooltip').hidden = true; });
  map.addEventListener('click', e => {
    const [px, py] = local(e, map), hit = mapHit(px, py);
    if (hit && hit[1].length > 4 && hit[1][4] >= 0) select(hit[1][4]);
  });
}

function start() {
  $('viewer').hidden = false;
  renderFacts();
  buildControls();
  relayout();
  renderPeaks();
  renderBandsNote();
  attach();
  drawAll();
  drawSegments();
}
