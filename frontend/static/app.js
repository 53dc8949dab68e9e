// Live dashboard of the aggregates: polls /api/snapshot and updates the page in place.
//
// Every aggregate value arrives as an exact, preformatted string; this script never
// parses one into a number. Hierarchy names come from untrusted messages, so text is
// only ever set with textContent on elements made with createElement, never parsed as HTML.
'use strict';

(() => {
  const POLL_INTERVAL_MS = 1000;
  const CHART_SECONDS = 300;
  const STALE_AFTER_SECONDS = 90; // the server refreshes every --interval (at most 60 s)
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const EXPANDED_STORAGE_KEY = 'aggregates.expanded';

  const byId = (id) => document.getElementById(id);

  /** Creates an element with an optional class and text (always as text). */
  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function svgElement(tag, attributes) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
    return node;
  }

  /** Sets text only when it changed; returns whether it did (to flash changed values). */
  function setText(node, text) {
    const value = text === null || text === undefined ? '—' : String(text);
    if (node.textContent === value) return false;
    node.textContent = value;
    return true;
  }

  /** Names a number cell's column, which a phone shows beside the number (the table head is hidden there). */
  function labelled(cell, label) {
    cell.dataset.label = label;
    return cell;
  }

  /** Sets a sentence as words, each a span; words with digits are numbers, which never break. */
  function setWords(node, text) {
    if (node.dataset.text === text) return;
    node.dataset.text = text;
    const parts = [];
    text.split(' ').forEach((word, index) => {
      if (index) parts.push(document.createTextNode(' '));
      parts.push(element('span', /\d/.test(word) ? 'number' : '', word));
    });
    node.replaceChildren(...parts);
  }

  // ------------------------------------------------------------------ decimal alignment

  /** A formatted value split at its decimal point (strings only: a value is never parsed). */
  function splitDecimal(text) {
    const value = text === null || text === undefined ? '—' : String(text);
    const point = value.indexOf('.');
    return point < 0 ? [value, ''] : [value.slice(0, point), value.slice(point)];
  }

  /**
   * Sets a value cell as its integer part and its fraction (point included), each a span, so that
   * alignColumn can line the decimal points up. Returns whether the text changed.
   */
  function setDecimal(cell, text) {
    const value = text === null || text === undefined ? '—' : String(text);
    if (cell.dataset.value === value) return false;
    cell.dataset.value = value;
    const [whole, fraction] = splitDecimal(value);
    const digits = element('span', 'digits');
    digits.append(element('span', 'int', whole), element('span', 'frac', fraction));
    cell.replaceChildren(digits);
    return true;
  }

  /**
   * Lines up the decimal points of right-aligned value cells: each fraction is padded on its right,
   * in characters of the monospaced tabular face (`ch`), to the column's longest fraction. Padding,
   * not spaces: the text stays the value, and nothing is ever cut.
   */
  function alignColumn(cells) {
    const lengths = cells.map((cell) => splitDecimal(cell.dataset.value)[1].length);
    const widest = Math.max(0, ...lengths);
    cells.forEach((cell, index) => {
      const fraction = cell.querySelector('.frac');
      if (fraction) fraction.style.paddingRight = `${widest - lengths[index]}ch`;
    });
  }

  function flash(node) {
    node.classList.remove('changed');
    void node.offsetWidth; // restart the animation
    node.classList.add('changed');
  }

  function isNegative(formatted) {
    return typeof formatted === 'string' && formatted.startsWith('-');
  }

  function clock(epochSeconds) {
    return new Date(epochSeconds * 1000).toLocaleTimeString([], { hour12: false });
  }

  function ago(seconds) {
    if (seconds < 1) return 'just now';
    if (seconds < 90) return `${Math.round(seconds)} s ago`;
    if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
    return `${Math.round(seconds / 3600)} h ago`;
  }

  // ------------------------------------------------------------------ expand/collapse state

  /** Keys of expanded nodes; survives refreshes (and reloads, per tab). */
  let expanded = null;
  try {
    const stored = sessionStorage.getItem(EXPANDED_STORAGE_KEY);
    if (stored) expanded = new Set(JSON.parse(stored));
  } catch (error) {
    expanded = null;
  }

  function saveExpanded() {
    try {
      sessionStorage.setItem(EXPANDED_STORAGE_KEY, JSON.stringify([...expanded]));
    } catch (error) {
      // storage disabled: the state still lives for this page
    }
  }

  // ------------------------------------------------------------------ hierarchy tree

  const treeRows = new Map(); // aggregate key -> row parts
  let lastSnapshot = null;

  function createTreeRow(key) {
    const row = element('tr');
    const nameCell = element('td', 'node');
    const toggle = element('button', 'toggle');
    toggle.type = 'button';
    toggle.addEventListener('click', () => {
      if (expanded.has(key)) expanded.delete(key);
      else expanded.add(key);
      saveExpanded();
      renderTree(lastSnapshot.tree);
    });
    const name = element('span', 'name');
    // One flex line: a long name wraps beside its toggle, never leaving the ▸ alone above it.
    const line = element('div', 'node-line');
    line.append(toggle, name);
    nameCell.append(line);
    const value = labelled(element('td', 'num value'), 'value');
    const count = labelled(element('td', 'num count'), 'trades');
    row.append(nameCell, value, count);
    row.dataset.key = key;
    return { row, nameCell, toggle, name, value, count };
  }

  function renderTree(tree) {
    const visible = [];
    const walk = (nodes, depth) => {
      for (const node of nodes) {
        visible.push([node, depth]);
        if (node.children.length && expanded.has(node.key)) walk(node.children, depth + 1);
      }
    };
    walk(tree, 0);

    const body = byId('tree-body');
    const seen = new Set();
    let previous = null;
    for (const [node, depth] of visible) {
      let parts = treeRows.get(node.key);
      const fresh = !parts;
      if (fresh) {
        parts = createTreeRow(node.key);
        treeRows.set(node.key, parts);
      }
      seen.add(node.key);
      parts.nameCell.style.setProperty('--depth', String(depth));
      parts.row.classList.toggle('top', depth === 0);
      setText(parts.name, node.name);
      parts.name.title = node.key;
      const hasChildren = node.children.length > 0;
      parts.toggle.disabled = !hasChildren;
      parts.toggle.classList.toggle('leaf', !hasChildren);
      setText(parts.toggle, hasChildren ? (expanded.has(node.key) ? '▾' : '▸') : '•');
      parts.toggle.setAttribute('aria-expanded', String(hasChildren && expanded.has(node.key)));
      parts.toggle.setAttribute('aria-label', `${expanded.has(node.key) ? 'Collapse' : 'Expand'} ${node.name}`);
      if (setDecimal(parts.value, node.value) && !fresh) flash(parts.value);
      if (setText(parts.count, node.trade_count) && !fresh) flash(parts.count);
      parts.value.classList.toggle('negative', isNegative(node.value));

      const expectedPosition = previous ? previous.nextSibling : body.firstChild;
      if (expectedPosition !== parts.row) body.insertBefore(parts.row, expectedPosition);
      previous = parts.row;
    }
    for (const [key, parts] of treeRows) {
      if (!seen.has(key)) {
        parts.row.remove();
        treeRows.delete(key);
      }
    }
    alignColumn(visible.map(([node]) => treeRows.get(node.key).value));
    byId('tree-empty').hidden = visible.length > 0;
  }

  function allKeys(nodes, into) {
    for (const node of nodes) {
      if (node.children.length) {
        into.push(node.key);
        allKeys(node.children, into);
      }
    }
    return into;
  }

  // ------------------------------------------------------------------ totals, figures, badge

  function renderTopLevel(snapshot) {
    const rows = snapshot.top_level.map((top) => {
      const row = element('tr');
      const name = element('td', 'node', top.name);
      name.title = top.key;
      const value = labelled(element('td', `num value${isNegative(top.value) ? ' negative' : ''}`), 'value');
      setDecimal(value, top.value);
      row.append(name, value, labelled(element('td', 'num', top.trade_count ?? '—'), 'trades'));
      return row;
    });
    byId('top-level').replaceChildren(...rows);
    const grandValue = byId('grand-value');
    if (setDecimal(grandValue, snapshot.totals.value)) flash(grandValue);
    alignColumn([...byId('top-level').querySelectorAll('td.value'), grandValue]);
    grandValue.classList.toggle('negative', isNegative(snapshot.totals.value));
    setText(byId('grand-count'), snapshot.totals.trade_count);
    setText(byId('node-count'), snapshot.totals.nodes);
  }

  function renderFigures(snapshot) {
    const stats = snapshot.stats;
    if (setText(byId('messages-applied'), stats.messages_applied ?? '—')) flash(byId('messages-applied'));
    setText(byId('applied-per-second'), stats.applied_per_second);
    setText(byId('latency-mean'), stats.latency_mean);
    setText(byId('latency-max'), stats.latency_max);
    const minutes = stats.latency_window_seconds / 60;
    setText(byId('latency-window'), minutes === 1 ? '(last minute)' : `(last ${minutes} min)`);
    setText(
      byId('last-applied'),
      stats.last_updated ? `last batch ${ago(snapshot.generated_at - stats.last_updated)}` : 'no batch applied yet',
    );
  }

  function renderBacklog(snapshot) {
    const backlog = snapshot.backlog || {};
    setText(byId('backlog-lag'), backlog.lag);
    setText(byId('backlog-ingested'), backlog.ingested);
    setText(byId('backlog-applied'), backlog.applied);
    setText(byId('backlog-to-apply'), backlog.to_apply);
    // Once exact, what the ledger counted beyond MessagesApplied is not lag: versions a later one replaced.
    const superseded = backlog.superseded && backlog.superseded !== '0' ? backlog.superseded : null;
    setText(byId('backlog-superseded'), superseded);
    byId('backlog-superseded-line').hidden = superseded === null;
  }

  function renderQuarantine(snapshot) {
    const quarantine = snapshot.quarantine;
    const count = byId('quarantine-count');
    setText(count, quarantine ? quarantine.count : '—');
    count.classList.toggle('negative', Boolean(quarantine && quarantine.count && quarantine.count !== '0'));
    const reasons = quarantine ? quarantine.latest.map((record) => element('li', '', record.reason)) : [];
    if (quarantine && quarantine.error) reasons.unshift(element('li', 'negative', quarantine.error));
    if (!quarantine) reasons.push(element('li', '', 'no QuarantineTable named'));
    byId('quarantine-latest').replaceChildren(...reasons);
  }

  function decimalCell(className, text) {
    const cell = element('td', className);
    setDecimal(cell, text);
    return cell;
  }

  function renderVerification(snapshot) {
    const verification = snapshot.verification;
    const badge = byId('verification');
    badge.className = `badge ${verification.status}`;
    setWords(badge, verification.label);
    setText(byId('verification-ledger'), verification.ledger ? `ledger ${verification.ledger}` : 'no ledger given');

    const panel = byId('differences-panel');
    const differences = verification.differences;
    panel.hidden = differences.length === 0;
    const rows = differences.map((difference) => {
      const row = element('tr');
      const describe = (totals) => `${totals.value} (${totals.trade_count})`;
      const sign = (formatted) => `num${isNegative(formatted) ? ' negative' : ''}`;
      row.append(
        element('td', 'node', difference.key),
        labelled(element('td', 'num', describe(difference.expected)), 'ledger'),
        labelled(element('td', 'num', describe(difference.actual)), 'table'),
        labelled(decimalCell(`${sign(difference.value_difference)} value`, difference.value_difference), 'Δ value'),
        labelled(element('td', sign(difference.trade_count_difference), difference.trade_count_difference), 'Δ trades'),
      );
      return row;
    });
    byId('differences-body').replaceChildren(...rows);
    alignColumn([...byId('differences-body').querySelectorAll('td.value')]);
    setText(
      byId('differences-title'),
      `${verification.differing_nodes} ${verification.differing_nodes === '1' ? 'node differs' : 'nodes differ'} from the ledger`,
    );
    const unlisted = verification.unlisted_differences;
    setText(byId('differences-more'), unlisted && unlisted !== '0' ? `and ${unlisted} more not listed` : '');
  }

  // ------------------------------------------------------------------ chart

  /** A "nice" upper bound for an axis (1, 2, 2.5 or 5 times a power of ten). */
  function niceCeiling(value) {
    if (!(value > 0)) return 1;
    const power = 10 ** Math.floor(Math.log10(value));
    for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
    return 10 * power;
  }

  function formatAxis(value, unit) {
    if (unit === 's') return value < 1 ? `${Math.round(value * 1000)} ms` : `${+value.toFixed(2)} s`;
    return value >= 1000 ? `${+(value / 1000).toFixed(1)}k` : `${+value.toFixed(1)}`;
  }

  /** Polyline path through the points that have a value; breaks where samples are far apart. */
  function linePath(points, x, y, maxGapSeconds) {
    let path = '';
    let previousT = null;
    for (const [t, v] of points) {
      if (v === null || v === undefined) continue;
      const move = previousT === null || t - previousT > maxGapSeconds;
      path += `${move ? 'M' : 'L'}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      previousT = t;
    }
    return path;
  }

  function renderChart(snapshot) {
    const container = byId('chart');
    const width = Math.max(container.clientWidth, 200);
    const panelHeight = 120;
    const gap = 34;
    const margin = { left: 64, right: 16, top: 18, bottom: 24 };
    const height = margin.top + panelHeight * 2 + gap + margin.bottom;
    const end = snapshot.generated_at;
    const start = end - CHART_SECONDS;
    const x = (t) => margin.left + ((t - start) / CHART_SECONDS) * (width - margin.left - margin.right);
    const points = snapshot.chart.filter((point) => point.t >= start);

    const svg = svgElement('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img' });
    svg.append(svgElement('title'));
    svg.firstChild.textContent = 'Messages applied per second and end-to-end latency over the last five minutes';

    const panels = [
      { top: margin.top, label: 'applied/s', unit: '/s', series: [['rate', 'line-rate', true]] },
      {
        top: margin.top + panelHeight + gap,
        label: 'latency',
        unit: 's',
        series: [
          // max drawn last: where a batch held one message, max equals mean and must not hide under it
          ['mean', 'line-mean', false],
          ['max', 'line-max', false],
        ],
      },
    ];
    for (const panel of panels) {
      const values = panel.series.flatMap(([field]) => points.map((point) => point[field])).filter((v) => v !== null);
      const ceiling = niceCeiling(values.length ? Math.max(...values) : 0);
      const y = (v) => panel.top + panelHeight - (v / ceiling) * panelHeight;
      const label = svgElement('text', { x: margin.left, y: panel.top - 6, class: 'chart-label' });
      label.textContent = panel.label;
      svg.append(label);
      for (const fraction of [0, 0.5, 1]) {
        const lineY = y(ceiling * fraction);
        svg.append(svgElement('line', { x1: margin.left, x2: width - margin.right, y1: lineY, y2: lineY, class: 'grid' }));
        const tick = svgElement('text', { x: margin.left - 8, y: lineY + 4, class: 'tick', 'text-anchor': 'end' });
        tick.textContent = formatAxis(ceiling * fraction, panel.unit);
        svg.append(tick);
      }
      for (const [field, className, filled] of panel.series) {
        // Throughput is sampled every refresh; latency only when a batch lands, so allow wider gaps.
        const series = points.map((point) => [point.t, point[field]]);
        const path = linePath(series, x, y, field === 'rate' ? 10 : 30);
        if (!path) continue;
        if (filled) {
          const present = series.filter(([, v]) => v !== null);
          const area = `${path}L${x(present[present.length - 1][0]).toFixed(1)},${y(0)}L${x(present[0][0]).toFixed(1)},${y(0)}Z`;
          svg.append(svgElement('path', { d: area, class: `${className} area` }));
        }
        svg.append(svgElement('path', { d: path, class: className }));
        if (!filled) {
          for (const [t, v] of series) {
            if (v !== null) svg.append(svgElement('circle', { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2, class: className }));
          }
        }
      }
    }
    const ticks = width < 480 ? [300, 150, 0] : [300, 240, 180, 120, 60, 0]; // a phone has room for three
    for (const secondsAgo of ticks) {
      const tick = svgElement('text', {
        x: x(end - secondsAgo),
        y: height - 6,
        class: 'tick',
        'text-anchor': secondsAgo === 300 ? 'start' : secondsAgo === 0 ? 'end' : 'middle',
      });
      tick.textContent = secondsAgo === 0 ? clock(end) : `−${+(secondsAgo / 60).toFixed(1)} min`;
      svg.append(tick);
    }
    container.replaceChildren(svg);
  }

  // ------------------------------------------------------------------ polling

  function setConnection(state, text) {
    const connection = byId('connection');
    connection.className = `connection ${state}`;
    setText(byId('connection-text'), text);
  }

  function render(snapshot) {
    lastSnapshot = snapshot;
    if (expanded === null) {
      expanded = new Set(snapshot.tree.map((node) => node.key)); // first visit: open the top level
      saveExpanded();
    }
    setText(byId('table-name'), snapshot.table);
    const error = byId('read-error');
    error.hidden = !snapshot.read_error;
    setText(error, snapshot.read_error ? `Showing the last good reading — ${snapshot.read_error}` : '');
    renderFigures(snapshot);
    renderBacklog(snapshot);
    renderQuarantine(snapshot);
    renderVerification(snapshot);
    renderTopLevel(snapshot);
    renderTree(snapshot.tree);
    renderChart(snapshot);
    if (snapshot.read_error) setConnection('stale', `table unreachable · last read ${clock(snapshot.last_read_at || 0)}`);
    else if (Date.now() / 1000 - snapshot.generated_at > STALE_AFTER_SECONDS) {
      setConnection('stale', `no fresh snapshot since ${clock(snapshot.generated_at)}`);
    } else setConnection('live', `live · ${clock(snapshot.generated_at)}`);
  }

  async function poll() {
    let snapshot = null;
    try {
      const response = await fetch('/api/snapshot', { cache: 'no-store' });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      snapshot = await response.json();
    } catch (error) {
      setConnection('down', 'dashboard server unreachable · retrying');
    }
    if (snapshot) {
      try {
        render(snapshot);
      } catch (error) {
        console.error(error);
        setConnection('down', `cannot display the snapshot: ${error}`);
      }
    }
    window.setTimeout(poll, POLL_INTERVAL_MS);
  }

  byId('expand-all').addEventListener('click', () => {
    if (!lastSnapshot) return;
    expanded = new Set(allKeys(lastSnapshot.tree, []));
    saveExpanded();
    renderTree(lastSnapshot.tree);
  });
  byId('collapse-all').addEventListener('click', () => {
    expanded = new Set();
    saveExpanded();
    if (lastSnapshot) renderTree(lastSnapshot.tree);
  });
  window.addEventListener('resize', () => {
    if (lastSnapshot) renderChart(lastSnapshot);
  });

  poll();
})();
