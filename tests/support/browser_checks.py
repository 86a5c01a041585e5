"""What a page must not show, checked in the browser (tests/ui): one JavaScript function for the
HTML reports and the dashboard's tabs alike (issue 30, "answers, not non-answers").

:data:`VIEW_PROBLEMS` takes a root element and returns a list of problems, each a short line:

* ``empty figure``: a plotly graph with no visible trace holding points, and no message saying why;
* ``unescaped markup``: a literal tag (``<b>``, ``<br>``, ``<a ...>``) or an entity (``&lt;``, ``&amp;``)
  visible as text, in the page or in a figure;
* ``null word``: a ``None``, ``NaN``, ``NaT``, ``nan`` or ``<NA>`` shown where a value should be;
* ``overlap``: two labels of one figure drawn over each other (the bounding boxes of its title, axis
  titles, legend items and annotations intersect);
* ``spinner``: a loading line still turning beside an error the view shows;
* ``clipped``: a table or figure wider than a box that does not scroll (its ``scrollWidth`` over its
  ``clientWidth``), or reaching past the window's right edge.
"""

from __future__ import annotations

VIEW_PROBLEMS = r"""(root) => {
    const problems = [];
    const shown = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
    const plots = [...root.querySelectorAll('.js-plotly-plot')].filter(shown);
    for (const p of plots) {
        const name = (p.querySelector('.gtitle')?.textContent || '(untitled)').slice(0, 80);
        // plotly's own view of the traces (typed arrays decoded, _length the points it draws)
        const data = p._fullData || p.data || [];
        const points = data.some(t => t.visible === true && (t._length > 0 ||
            ['x', 'y', 'values'].some(k => t[k] && t[k].length)));
        const message = ((p.layout && p.layout.annotations) || []).some(a => (a.text || '').trim());
        if (!points && !message) problems.push('empty figure: ' + name);
        // the labels of the figure, by kind; two of different kinds (or two annotations) must not meet
        const labels = [];
        const add = (kind, el) => {
            const r = el.getBoundingClientRect();
            if (r.width > 0 && r.height > 0 && (el.textContent || '').trim()) labels.push({kind, r, text: el.textContent.trim()});
        };
        p.querySelectorAll('.gtitle').forEach(e => add('title', e));
        p.querySelectorAll('.g-xtitle text, .g-ytitle text, .g-y2title text, .g-x2title text').forEach(e => add('axis title', e));
        p.querySelectorAll('.legend .traces').forEach(e => add('legend', e));
        p.querySelectorAll('.legend .legendtitletext').forEach(e => add('legend title', e));
        p.querySelectorAll('.annotation-text-g text, .annotation text').forEach(e => add('annotation', e));
        const seen = new Set();
        for (let i = 0; i < labels.length; i++) {
            for (let j = i + 1; j < labels.length; j++) {
                const a = labels[i], b = labels[j];
                if (a.kind === b.kind && a.kind !== 'annotation') continue;
                if (a.text === b.text && a.kind === b.kind) continue;
                const w = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
                const h = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
                if (w > 1 && h > 1) {
                    const line = `overlap in ${name}: ${a.kind} "${a.text.slice(0, 30)}" and ${b.kind} "${b.text.slice(0, 30)}"`;
                    if (!seen.has(line)) { seen.add(line); problems.push(line); }
                }
            }
        }
        // tick labels of one axis side by side must not run into each other
        for (const axis of p.querySelectorAll('.xaxislayer-above, .yaxislayer-above')) {
            const ticks = [...axis.querySelectorAll('.xtick text, .ytick text')].map(e => ({
                r: e.getBoundingClientRect(), t: e.textContent, h: e.getBBox().height,
                angle: parseFloat(((e.getAttribute('transform') || '').match(/rotate\(([-\d.]+)/) || [0, 0])[1]),
            })).filter(x => x.r.width > 0);
            for (let i = 1; i < ticks.length; i++) {
                const a = ticks[i - 1].r, b = ticks[i].r;
                let w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
                if (ticks[i].angle) {  // tilted labels are parallel strips: they meet when closer than a line's height
                    const th = ticks[i].angle * Math.PI / 180;
                    const dx = (b.left + b.right - a.left - a.right) / 2, dy = (b.top + b.bottom - a.top - a.bottom) / 2;
                    h = ticks[i].h - Math.abs(dx * Math.sin(th) - dy * Math.cos(th));
                }
                if (w > 1 && h > 1) { problems.push(`overlap in ${name}: tick labels "${ticks[i - 1].t.slice(0, 30)}" and "${ticks[i].t.slice(0, 30)}"`); break; }
            }
        }
        for (const t of p.querySelectorAll('svg text')) {
            if (/<\/?[a-z][a-z0-9]*(\s[^>]*)?>|&(lt|gt|amp|quot|#\d+);/i.test(t.textContent || '')) {
                problems.push('unescaped markup in ' + name + ': ' + t.textContent.slice(0, 60));
            }
        }
    }
    const text = root.innerText || '';
    const tag = text.match(/<\/?(b|i|br|a|img|span|div|td|tr|table|script|code)\b[^>]*>|&(lt|gt|amp|quot|#\d+);/i);
    if (tag) problems.push('unescaped markup in the text: ' + tag[0]);
    for (const w of ['None', 'NaN', 'NaT', 'nan', '<NA>']) {
        if (new RegExp('(^|[^\\w-])' + w + '($|[^\\w-])').test(text)) problems.push('null word ' + w);
    }
    const errors = [...root.querySelectorAll('.widget-html, .sx-error')].filter(e => shown(e) && /Error while/.test(e.innerText));
    const spinning = [...root.querySelectorAll('.sx-loading')].filter(shown);
    if (errors.length && spinning.length) problems.push('spinner beside an error: ' + spinning[0].innerText.slice(0, 80));
    const right = document.documentElement.clientWidth;
    const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
    for (const t of [...root.querySelectorAll('table'), ...plots].filter(shown)) {
        let box = t.parentElement, scrolled = false;
        for (let e = t.parentElement; e && e !== root.parentElement; e = e.parentElement) {
            if (scrolls(e)) { scrolled = true; break; }
        }
        if (scrolled) continue;
        const what = (t.tagName === 'TABLE' ? 'table: ' + t.innerText : 'figure: ' + (t.querySelector('.gtitle')?.textContent || '')).slice(0, 60);
        if (box && box.scrollWidth > box.clientWidth + 1) problems.push('clipped ' + what);
        else if (t.getBoundingClientRect().right > right + 1) problems.push('past the window ' + what);
    }
    return problems;
}"""

#: JavaScript: whether every plotly graph under the root (a CSS selector) has been drawn
PLOTS_DRAWN = r"""(selector) => {
    const root = document.querySelector(selector);
    const figs = [...root.querySelectorAll('.js-plotly-plot')];
    return figs.every(p => p._fullLayout && p.querySelector('.main-svg'));
}"""
