// gpumem viz, last part: the page's self-test, run when it is opened as PAGE.html#selftest (the
// project's tests do so in a headless browser). It works the page as a person would, through real
// DOM events: zooms in on the peak with the wheel and by dragging, hovers over the largest band
// live there and clicks it, switches the layout and the configuration, and writes what the page
// then shows into #selftest, one line a step. What the canvases show is read back from their
// pixels: the page's own model says where a band is, and only the pixels tell that it was drawn
// there. Then the page starts.

// What an element shows, on one line: its lines joined by " | ", a table's cells by ": ".
function shown(id) {
  const e = $(id);
  if (e.hidden) return '(hidden)';
  return e.innerText.replace(/\t/g, ': ').split('\n').map(l => l.trim()).filter(l => l).join(' | ');
}

function selftestClient(canvas, px, py) {
  const r = canvas.getBoundingClientRect();
  return {clientX: r.left + px, clientY: r.top + py, bubbles: true, cancelable: true, view: window};
}

// The largest band live at x, and a point inside it: [band, px, py], or null. The point is a few
// pixels clear of the line that marks the peak, which is drawn over the bands.
function selftestTarget(x, peak) {
  const c = col(), px = Math.max(sx(x), sx(peak) + 8);
  x = vx(px);
  let best = null;
  for (const band of S.L.bands)
    if (band.pts[0][c] <= x && band.end[c] > x && (!best || band.block.size > best.block.size)) best = band;
  if (!best) return null;
  const base = S.L.byLane.get(best.lane).base, off = bandOffset(best, x, c);
  return [best, px, sy(base + off + best.block.size / 2)];
}

// ---- Pixels ----

let selftestScratch = null;
// The [r, g, b] a canvas paints for a CSS colour: painted on a canvas of its own, and read back.
function selftestRgb(css) {
  if (!selftestScratch) selftestScratch = document.createElement('canvas').getContext('2d', {willReadFrequently: true});
  selftestScratch.clearRect(0, 0, 1, 1);
  selftestScratch.fillStyle = css;
  selftestScratch.fillRect(0, 0, 1, 1);
  return [...selftestScratch.getImageData(0, 0, 1, 1).data.slice(0, 3)];
}
// The [r, g, b, a] of a canvas at a point in CSS pixels.
function selftestPixel(canvas, px, py) {
  const ratio = canvas.width / (canvas.clientWidth || canvas.width);
  return [...canvas.getContext('2d').getImageData(Math.floor(px * ratio), Math.floor(py * ratio), 1, 1).data];
}
// Whether what (a band, a block) is drawn in its colour css at a point, and if not what is there.
function selftestDrawn(what, canvas, px, py, css) {
  const p = selftestPixel(canvas, px, py), want = selftestRgb(css);
  if (p[3] === 255 && want.every((v, k) => Math.abs(v - p[k]) <= 2)) return what + ' is drawn in its colour';
  return what + ' is NOT drawn in its colour (' + css + '): the canvas holds rgba(' + p.join(',') + ')';
}
// How much of a canvas is painted (not left clear or white), and how much in colour (not grey).
function selftestPainted(canvas) {
  const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0, coloured = 0;
  for (let i = 0; i < data.length; i += 4) {
    const r = data[i], g = data[i + 1], b = data[i + 2];
    if (!data[i + 3] || (r === 255 && g === 255 && b === 255)) continue;
    painted++;
    if (Math.max(r, g, b) - Math.min(r, g, b) > 40) coloured++;
  }
  const all = Math.max(data.length / 4, 1), pc = n => Math.floor((100 * n) / all) + '%';
  return canvas.id + ' ' + pc(painted) + ' painted, ' + pc(coloured) + ' in colour';
}

function selftestSteps(log) {
  const chart = $('timeline'), cfg = D.configs[S.ci], g = S.g;
  log('peaks: ' + shown('peaks'));
  log('bands: ' + $('bands-note').textContent);
  if (!cfg.allocs) return log('nothing allocated: ' + $('view-range').textContent + ' ' + $('segments-note').textContent);
  // The wheel, over the peak: six notches in.
  const x = peakX(cfg) + (S.axis === 'time' ? 0 : 0.5);
  for (let i = 0; i < 6; i++)
    chart.dispatchEvent(new WheelEvent('wheel', {...selftestClient(chart, sx(x), g.y0 + 20), deltaY: -200}));
  const seen = S.view[0] <= x && x <= S.view[1];
  log('zoom: ' + $('view-range').textContent + (seen ? ' The peak is in view.' : ' The peak is NOT in view.'));
  // A drag over the middle half of the view, around the peak.
  const from = Math.max(sx(x) - (g.x1 - g.x0) / 4, g.x0 + 1), to = Math.min(sx(x) + (g.x1 - g.x0) / 4, g.x1 - 1);
  chart.dispatchEvent(new MouseEvent('mousedown', {...selftestClient(chart, from, g.y0 + 30), button: 0}));
  window.dispatchEvent(new MouseEvent('mousemove', selftestClient(chart, to, g.y0 + 30)));
  window.dispatchEvent(new MouseEvent('mouseup', selftestClient(chart, to, g.y0 + 30)));
  chart.dispatchEvent(new MouseEvent('click', selftestClient(chart, to, g.y0 + 30))); // as a browser follows a drag
  log('drag: ' + $('view-range').textContent);
  const target = selftestTarget(x, peakX(cfg));
  if (!target) return log('hover: no band is live at the peak');
  chart.dispatchEvent(new MouseEvent('mousemove', selftestClient(chart, target[1], target[2])));
  log('hover: ' + shown('tooltip'));
  chart.dispatchEvent(new MouseEvent('click', selftestClient(chart, target[1], target[2])));
  log('click: ' + shown('details'));
  log('band pixel: ' + selftestDrawn('where it was clicked, the band', chart, target[1], target[2],
    bandColour(target[0].block, S.byStream)));
  log('segments: ' + $('segments-title').textContent + '. ' + $('left-out').textContent);
  if (cfg.map) {
    const total = mapTotal(cfg.map);
    log('map total: ' + (total === cfg.peak_reserved ? 'equals the peak reserved bytes'
      : exact(total) + ', not the peak reserved ' + exact(cfg.peak_reserved)));
  }
  selftestSegmentHover(log);
  log('pixels: ' + ['timeline', 'overview', 'segments'].map(id => selftestPainted($(id))).join(', '));
  document.querySelector('input[name=layout][value=lanes]').click();
  log('lanes: ' + S.L.lanes.map(l => l.label).join(', '));
  document.querySelector('input[name=layout][value=stack]').click();
  if (END_NS) {
    document.querySelector('input[name=axis][value=time]').click();
    log('time axis: ' + $('view-range').textContent);
    document.querySelector('input[name=axis][value=records]').click();
  }
  const buttons = document.querySelectorAll('.config-button');
  if (buttons.length > 1) {
    buttons[1].click();
    log('config: ' + D.configs[S.ci].name + ' drawn | ' + $('peaks').children[1].textContent + ' | ' +
      $('segments-title').textContent + ' | ' + $('segments-note').textContent + ' | ' + shown('left-out') + ' | selected: ' + shown('details'));
    buttons[0].click();
  }
}

// The largest block in use of the segment map, hovered over.
function selftestSegmentHover(log) {
  const map = D.configs[S.ci].map, canvas = $('segments');
  if (!map || !map.rows.length || !S.map) return log('segment hover: no segment map');
  const row = map.rows[0], extent = row.extent || row.size || 1;
  let best = null;
  for (const b of row.blocks) if (b[2] === 1 && (!best || b[1] > best[1])) best = b;
  if (!best) return log('segment hover: the largest segment holds nothing in use');
  const px = S.map.x0 + ((best[0] + best[1] / 2) / extent) * (S.map.x1 - S.map.x0);
  canvas.dispatchEvent(new MouseEvent('mousemove', selftestClient(canvas, px, ROW.top + ROW.bar / 2)));
  log('segment hover: ' + shown('tooltip'));
  log('block pixel: ' + selftestDrawn('where it was hovered over, the block', canvas, px, ROW.top + ROW.bar / 2,
    mapBlockColour(best)));
}

// What the page's own handlers threw: an event's listener that throws does not stop dispatchEvent.
const selftestErrors = [];
if (SELFTEST) window.addEventListener('error', e => selftestErrors.push(e.message + ' at line ' + e.lineno));

function selftest() {
  const out = [];
  const log = line => out.push('selftest ' + line);
  try {
    selftestSteps(log);
  } catch (e) {
    selftestErrors.push(e + '\n' + e.stack);
  }
  for (const e of selftestErrors) log('error: ' + e);
  if (!selftestErrors.length) log('done');
  $('selftest').textContent = out.join('\n');
  $('selftest').hidden = false;
  window.scrollTo(0, 0); // clicking the controls scrolled them into view
}

try {
  start();
  if (SELFTEST) selftest();
} catch (e) {
  $('selftest').textContent = 'selftest error: the page did not start: ' + e + '\n' + e.stack;
  $('selftest').hidden = !SELFTEST;
}
